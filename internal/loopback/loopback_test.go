package loopback

import "testing"

func TestIs(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8788":              true,
		"127.0.0.1":                   true,
		"127.9.9.9:1":                 true,
		"localhost":                   true,
		"LocalHost:8788":              true,
		"[::1]:8788":                  true,
		"::1":                         true,
		"[::1]":                       true,
		"[::ffff:127.0.0.1]:1":        true,
		"":                            false,
		":8788":                       false,
		"0.0.0.0:8788":                false,
		"[::]:8788":                   false,
		"10.0.0.7:8788":               false,
		"evil.example":                false,
		"evil.example:8788":           false,
		"localhost.evil.example:8788": false,
		"localhost.:8788":             false,
		"127.0.0.1.nip.io":            false,
		"[fe80::1%lo]:8788":           false,
		"[::1%lo]:8788":               false,
	} {
		if got := Is(addr); got != want {
			t.Errorf("Is(%q) = %v, want %v", addr, got, want)
		}
	}
}
