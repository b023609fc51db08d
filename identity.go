package redlock

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Who holds a lock: the identity a lock's value records (WithIdentity).

// MaxIdentity is the longest identity [WithIdentity] takes, in bytes.
const MaxIdentity = 64

// defaultIdentity is the host name and process id.
var defaultIdentity = sync.OnceValue(func() string {
	pid := "/" + strconv.Itoa(os.Getpid())
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	host = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, host)
	for len(host)+len(pid) > MaxIdentity || !utf8.ValidString(host) {
		host = host[:len(host)-1]
	}
	return host + pid
})

// identityError reports an identity that WithIdentity refuses.
func identityError(id string) error {
	switch {
	case len(id) > MaxIdentity:
		return invalid("identity %.20q... is %d bytes, above %d (WithIdentity): shorten it", id, len(id), MaxIdentity)
	case !utf8.ValidString(id):
		return invalid("identity %q is not valid UTF-8 (WithIdentity)", id)
	}
	for _, r := range id {
		if !unicode.IsPrint(r) && r != ' ' {
			return invalid("identity %q holds the unprintable character %U (WithIdentity): use printable characters", id, r)
		}
	}
	return nil
}

// identitySuffix is what follows a value's random part for identity id.
func identitySuffix(id string) string {
	if id == "" {
		return ""
	}
	var b strings.Builder
	b.Grow(1 + len(id))
	b.WriteByte('@')
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c > ' ' && c < 0x7f && c != '%' && c != ':':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		}
	}
	return b.String()
}

const hexDigits = "0123456789abcdef"

// IdentityOf returns the identity that value (a [Lock.Value], or a value
// [Redlock.Inspect] shows) records, or "" when it records none (a value of
// node-redlock, say).
func IdentityOf(value string) string {
	if len(value) <= valueLen+1 || value[valueLen] != '@' {
		return ""
	}
	s := value[valueLen+1:]
	if !strings.Contains(s, "%") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			hi, lo := strings.IndexByte(hexDigits, s[i+1]), strings.IndexByte(hexDigits, s[i+2])
			if hi >= 0 && lo >= 0 {
				b = append(b, byte(hi<<4|lo))
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}

// valueLen is the length of a lock value's random part (its identity follows).
const valueLen = 32
