// Package codeshape holds tests only: limits on the shape of the code
// that reviews kept asking for and that drift back unless checked — no
// function on the request path (proxy) or in the cluster (proxy/cluster)
// longer than maxFuncLines. A function over the limit is a sign it does
// two jobs; split it into named steps rather than raising the limit.
package codeshape
