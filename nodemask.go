package redlock

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// The masker: a node list's credentials kept out of the errors that quote it.

// A masker hides the credentials of a node list in the errors that quote
// it. A password may hold any character, a comma or a space included (the
// list is split at commas before anything is parsed), so what is hidden is
// found in the whole list: the user information of each URL, from its
// "://" to the last "@" before the next "://"; "user:password@" in an entry
// without a scheme; and the values of password= options, to the next "&"
// or "://".
//
// A credential that holds a comma is cut by the list's split into entries
// of their own, which the parsers read as hosts, ports and databases, and
// quote; a piece under 3 bytes is too short to look for in their words (a
// "w" is in "write"). So ParseNodes refuses, before any parser sees it, a
// URL whose user information holds a comma (split) and an entry that is
// not a URL but holds a credential (holds), quoting each as masked. A / ?
// or # cuts a credential too, for the URL parser, which quotes the rest as
// a database or an option: its words are left out then (holdsAny).
type masker struct {
	list    string
	secret  []bool   // list[i] is part of a credential
	secrets []string // the credentials, and their passwords, 3 bytes or longer
	// split is the first URL whose user information holds a comma, from
	// its entry's start to the end of the entry that holds its "@"; to is
	// 0 when there is none.
	split struct{ from, to int }
}

func newMasker(list string) *masker {
	m := &masker{list: list, secret: make([]bool, len(list))}
	mark := func(from, to int) {
		for i := from; i < to; i++ {
			m.secret[i] = true
		}
		c := list[from:to]
		for _, v := range append([]string{c}, strings.Split(c, ":")...) {
			if len(v) >= 3 {
				m.secrets = append(m.secrets, v)
			}
		}
	}
	nextScheme := func(from int) int {
		if k := strings.Index(list[from:], "://"); k >= 0 {
			return from + k
		}
		return len(list)
	}
	for i := 0; ; {
		k := strings.Index(list[i:], "://")
		if k < 0 {
			break
		}
		start := i + k + 3
		if at := strings.LastIndex(list[start:nextScheme(start)], "@"); at >= 0 {
			mark(start, start+at)
			if m.split.to == 0 && strings.Contains(list[start:start+at], ",") {
				m.split.from, m.split.to = entryAround(list, i+k, start+at)
			}
		}
		i = start
	}
	from := 0
	for _, e := range strings.Split(list, ",") {
		if at := strings.LastIndex(e, "@"); at >= 0 && !strings.Contains(e, "://") {
			mark(from, from+at)
		}
		from += len(e) + 1
	}
	lower := strings.ToLower(list)
	for i := 0; ; {
		k := strings.Index(lower[i:], "password=")
		if k < 0 {
			break
		}
		start := i + k + len("password=")
		end := nextScheme(start)
		if amp := strings.IndexByte(list[start:end], '&'); amp >= 0 {
			end = start + amp
		}
		mark(start, end)
		i = start
	}
	return m
}

// entryAround returns where the entries of list from the one holding
// list[from] to the one holding list[to] start and end, less their blanks.
func entryAround(list string, from, to int) (int, int) {
	from = strings.LastIndexByte(list[:from], ',') + 1
	if c := strings.IndexByte(list[to:], ','); c >= 0 {
		to += c
	} else {
		to = len(list)
	}
	e := list[from:to]
	return from + len(e) - len(strings.TrimLeftFunc(e, unicode.IsSpace)), from + len(strings.TrimRightFunc(e, unicode.IsSpace))
}

// noURL refuses entries[i], which holds a credential but is not a URL.
func (m *masker) noURL(entries []string, i int) error {
	from := 0
	for _, e := range entries[:i] {
		from += len(e) + 1
	}
	e := entries[i]
	lead := len(e) - len(strings.TrimLeftFunc(e, unicode.IsSpace))
	return m.invalid("node %s: a user or password in a node that is not a URL: "+
		"write the node as redis://USER:PASSWORD@host:port (a comma in a password as %%2C)",
		m.quote(from+lead, from+lead+len(strings.TrimSpace(e))))
}

// holds reports whether list[from:to] holds a byte of a credential.
func (m *masker) holds(from, to int) bool {
	return slices.Contains(m.secret[from:to], true)
}

// holdsAny reports whether a credential in list[from:to] holds a byte of
// chars.
func (m *masker) holdsAny(from, to int, chars string) bool {
	for i := from; i < to; i++ {
		if m.secret[i] && strings.IndexByte(chars, m.list[i]) >= 0 {
			return true
		}
	}
	return false
}

// quote returns list[from:to] quoted, each run of credential in it
// replaced by "xxxxx".
func (m *masker) quote(from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		if !m.secret[i] {
			b.WriteByte(m.list[i])
			continue
		}
		b.WriteString("xxxxx")
		for i+1 < to && m.secret[i+1] {
			i++
		}
	}
	return strconv.Quote(b.String())
}

// invalid is the package's invalid with every credential of the list masked
// wherever the message has it (a parser's words may quote a piece of one).
func (m *masker) invalid(format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	for _, s := range m.secrets {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	return invalid("%s", msg)
}
