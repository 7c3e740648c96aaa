package config

import (
	"os"
	"testing"
)

func BenchmarkParseExample(b *testing.B) {
	data, err := os.ReadFile("../config.example.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse("config.example.yaml", data, noEnv); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseSize(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseSize("512MiB"); err != nil {
			b.Fatal(err)
		}
	}
}
