module github.com/rbcast/rbcast

go 1.26.0

require (
	github.com/gopacket/gopacket v1.7.7
	github.com/mdlayher/packet v1.2.0
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
	kernel.org/pub/linux/libs/security/libcap/cap v1.2.78
)

require (
	github.com/mdlayher/socket v0.7.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	kernel.org/pub/linux/libs/security/libcap/psx v1.2.78 // indirect
)
