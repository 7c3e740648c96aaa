# Sourced by bench/peers.sh and bench/economics.sh: the performance
# settings the peers' own documentation recommends, sized for this machine
# (bench/README.md lists them with nginx's, which are in nginx.conf.in).

# varnish_threads prints varnishd's thread flags for a varnishd serving
# the given number of client connections: one thread pool per core, each
# pool's idle minimum enough for its share of the connections (Varnish
# holds a worker thread per active connection; never below the default
# 100), the maximum Varnish's documented 5000.
varnish_threads() { # connections
	local pools min
	pools=$(nproc)
	min=$(( ($1 + pools - 1) / pools ))
	[ "$min" -lt 100 ] && min=100
	echo "-p thread_pools=$pools -p thread_pool_min=$min -p thread_pool_max=5000"
}
