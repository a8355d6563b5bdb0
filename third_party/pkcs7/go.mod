module github.com/digitorus/pkcs7

go 1.13
