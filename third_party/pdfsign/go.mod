module github.com/digitorus/pdfsign

go 1.23.0

toolchain go1.23.6

require (
	github.com/digitorus/pdf v0.1.2
	github.com/digitorus/pkcs7 v0.0.0-20230818184609-3a137a874352
	github.com/digitorus/timestamp v0.0.0-20231217203849-220c5c2851b7
	github.com/mattetti/filebuffer v1.0.1
	golang.org/x/crypto v0.41.0
	golang.org/x/text v0.28.0
)

// keygate: the copy of digitorus/pkcs7 beside this one, as the main
// module uses it (SkipSigningTime).
replace github.com/digitorus/pkcs7 => ../pkcs7
