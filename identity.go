package redlock

import (
	"crypto/rand"
	"os"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Who holds a lock: the identity a lock's value records (WithIdentity).

// WithIdentity sets who takes the locks, the permits, the shared locks and
// the terms: [Redlock.Inspect] shows it for each holder, so that an
// operator can tell which host, process or job holds a resource. It is
// recorded in the lock's value (its 32 random hex characters, then "@" and
// the identity, escaped so that it holds no ':', '%', space or byte outside
// printable ASCII), so it costs no round trip. The clients of node-redlock,
// which compare values as opaque strings, exclude and are excluded as
// before. id is at most [MaxIdentity] bytes of printable UTF-8; "" records
// none (the value is the 32 hex characters alone). Default: the host name
// and the process id, "host/pid" (the host name cut to fit).
func WithIdentity(id string) LockOption {
	return func(c *config) { c.identity, c.idSuffix = id, identitySuffix(id) }
}

// MaxIdentity is the longest identity [WithIdentity] takes, in bytes.
const MaxIdentity = 64

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

// valueLen is the length of a lock value's random part (its identity follows).
const valueLen = 32

// newValue returns a new lock value: valueLen random hex characters, unique
// to one lock, then c's identity.
func (c *config) newValue() string {
	var r [valueLen / 2]byte
	_, _ = rand.Read(r[:]) // never fails (crypto/rand, Go 1.24+)
	var b strings.Builder
	b.Grow(valueLen + len(c.idSuffix))
	for _, x := range r {
		b.WriteByte(hexDigits[x>>4])
		b.WriteByte(hexDigits[x&15])
	}
	b.WriteString(c.idSuffix)
	return b.String()
}
