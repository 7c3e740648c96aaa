// Package rawio makes a plain socket's reads, writes and sendfile calls
// as raw system calls (no runtime entersyscall/exitsyscall) from
// syscall.RawConn callbacks, which wait for readiness in the network
// poller and within the connection's deadlines as net.Conn's own calls
// do; the socket is non-blocking, so each call returns at once.
//
// Why (docs/architecture.md §9): Go's entersyscall wakes the runtime's
// monitor thread (sysmon) whenever every P was idle and resets its
// polling to every 20 µs, and sysmon hands a P seen in one system call
// across two of its ticks to another thread. A proxy is often all idle
// between requests, so with the runtime's calls sysmon woke about a
// thousand times a second under load and Ps moved between threads:
// context switches this machine pays dearly for. The public listener's
// connections (proxy/listener: plain ones, and the TCP connection under
// TLS and cleartext HTTP/2), the origins' (proxy/upstream, under TLS
// too) and the cluster's peer connections on plain TCP (proxy/cluster)
// use it; TLS peer connections (cluster.tls) keep their own calls.
//
// The same reason, one system call fewer, is why a connection between
// requests waits for its socket to turn readable in a Watch (ready_linux.go)
// instead of a read that finds nothing.
//
// It imports nothing of the project (internal/importrules enforces it).
//
// Files (internal/doccheck checks that the list names every non-test file
// of the directory and nothing else):
//
//	sys_norace.go  the read, write, writev and sendfile system calls: raw up to Max bytes,
//	               sendfile raw at most SendfileMax a call (Linux)
//	sys_race.go    the same through package syscall, which the race detector follows (no writev)
//	sys_linux.go   what both share: SendfileMax, errno
//	conn_linux.go  Call: one raw read or write's state and its RawConn callbacks;
//	               Conn, Wrap: a TCP connection whose Read and Write are raw
//	               calls from its RawConn's callbacks, bound once (no allocation)
//	conn_other.go  Wrap elsewhere: the connection itself
//	listener.go    Listener: accepted connections wrapped, for TLS over raw calls;
//	               TCPWrapper: a wrapper Wrap treats as the TCP connection it holds
//	ready_linux.go Watch: a socket's readiness from the process's own epoll
//	               instance, so a connection between requests reads only once
//	               its next request came (no read that finds nothing)
//	ready_other.go Watch elsewhere: none (NewWatch returns nil)
package rawio
