package config

import (
	"crypto/tls"
	"crypto/x509"
	"os"
)

// validateOriginTLS checks an origin's tls block: files that load, a
// client certificate given whole.
func (d *decoder) validateOriginTLS(p string, o *Origin) {
	t := &o.TLS
	tp := p + ".tls"
	d.keyPair(tp, t.CertFile, t.KeyFile, false)
	if t.CAFile != "" {
		d.caFile(tp+".ca_file", t.CAFile)
	}
	if t.ServerName != "" && checkHost(t.ServerName) != "" {
		d.problem(tp+".server_name", "invalid host name %q", t.ServerName)
	}
}

// keyPair checks that cert and key are both set (or, unless required,
// both empty) and load as a pair.
func (d *decoder) keyPair(p, cert, key string, required bool) {
	switch {
	case cert == "" && key == "":
		if required {
			d.problem(p+".cert_file", "required: a PEM certificate (chain) file")
			d.problem(p+".key_file", "required: the certificate's PEM key file")
		}
		return
	case cert == "":
		d.problem(p+".cert_file", "required with key_file")
		return
	case key == "":
		d.problem(p+".key_file", "required with cert_file")
		return
	}
	if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
		d.problem(p+".cert_file", "cannot load the certificate and key: %v", err)
	}
}

// caFile checks that a PEM bundle holds at least one certificate.
func (d *decoder) caFile(p, file string) {
	if _, err := LoadCAPool(file); err != nil {
		d.problem(p, "%v", err)
	}
}

// LoadCAPool reads a PEM bundle of CA certificates.
func LoadCAPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, &caError{file: file}
	}
	return pool, nil
}

type caError struct{ file string }

func (e *caError) Error() string { return "no PEM certificate in " + e.file }
