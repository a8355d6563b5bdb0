// Package access is what a request may do, and who asks: the two
// services and their privileges, each service's operation table that the
// key check and the API handlers read alike, and the identity of the key
// that authorized a request.
package access
