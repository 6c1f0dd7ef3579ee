// Package redact keeps what an endpoint URL may carry in secret out of log
// lines, errors, rows and answers: providers put API keys in the path
// (https://mainnet.infura.io/v3/KEY), in the query (?apikey=KEY) and in the
// user info (https://user:password@host). URL is the one way an endpoint
// is named; Text and Error apply it to the URLs quoted in a message.
package redact

import (
	"cmp"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Unparsable names a URL that does not parse or names no host.
const Unparsable = "unparsable URL"

// URL names raw by its scheme and host only, e.g. "https://node.example:8545",
// followed by "/..." when raw has a path, a query or a fragment. Its user info
// is never shown. A URL that does not parse, or names no host, is Unparsable.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return Unparsable
	}
	name := u.Scheme + "://" + u.Host
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		name += "/..."
	}
	return name
}

// urlToken is a URL as messages quote it: a scheme, "://" and everything up
// to a space or a quote (net/url and net/http quote URLs with %q).
var urlToken = regexp.MustCompile("[A-Za-z][A-Za-z0-9+.-]*://[^\\s\"'<>`]+")

// Text returns s with every URL in it, whatever its host and form (with or
// without its user info, with the password masked, escaped), replaced by its
// URL name, and with what is left of each of raws' user info, path and query
// (a server that echoes the request's path in its error, say) replaced by
// "...". A user name, password, path segment or query value shorter than 8
// bytes is hidden only inside URLs: alone, it is too likely to be an
// ordinary word of the message.
func Text(s string, raws ...string) string {
	matches := urlToken.FindAllStringIndex(s, -1)
	if len(matches) == 0 && len(raws) == 0 {
		return s
	}
	pieces := secrets(raws)
	var b strings.Builder
	last := 0
	for _, m := range matches {
		token, tail := trimTail(s[m[0]:m[1]])
		b.WriteString(scrub(s[last:m[0]], pieces))
		b.WriteString(URL(token))
		b.WriteString(tail)
		last = m[1]
	}
	b.WriteString(scrub(s[last:], pieces))
	return b.String()
}

// Error returns err with its text redacted as Text does; errors.Is and
// errors.As still see err. nil stays nil, and an error with nothing to hide
// is returned as it is.
func Error(err error, raws ...string) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	red := Text(text, raws...)
	if red == text {
		return err
	}
	return &redactedError{err: err, text: red}
}

// redactedError is an error whose text was redacted.
type redactedError struct {
	err  error
	text string
}

func (e *redactedError) Error() string { return e.text }
func (e *redactedError) Unwrap() error { return e.err }

// trimTail splits off the punctuation that follows a URL in prose ("(URL):",
// "URL,") rather than belonging to it: closing brackets only when unbalanced.
func trimTail(token string) (string, string) {
	end := len(token)
	for end > 0 {
		switch c := token[end-1]; {
		case strings.IndexByte(",;:!?", c) >= 0,
			c == ')' && strings.Count(token[:end], ")") > strings.Count(token[:end], "("),
			c == ']' && strings.Count(token[:end], "]") > strings.Count(token[:end], "["):
			end--
			continue
		}
		break
	}
	return token[:end], token[end:]
}

// minAlone is the shortest single user name, password, path segment or
// query value hidden outside URLs.
const minAlone = 8

// secrets lists what of raws must not show outside a URL, longest first so
// that no longer piece is left half hidden.
func secrets(raws []string) []string {
	var out []string
	add := func(s string, min int) {
		if len(s) >= min && s != "/" {
			out = append(out, s)
		}
	}
	for _, raw := range raws {
		if raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil {
			// No telling where its parts start: hide it whole, and all
			// of it after the scheme.
			add(raw, 1)
			if _, rest, ok := strings.Cut(raw, "://"); ok {
				add(rest, 1)
			}
			continue
		}
		// Compound parts (they hold '/', '=' or ':') are hidden whatever
		// their length; single words only when long enough to be keys.
		const compound = 4
		if u.User != nil {
			add(u.User.String(), compound)
			user := u.User.Username()
			add(user, minAlone)
			if pw, ok := u.User.Password(); ok {
				add(user+":"+pw, compound)
				add(pw, minAlone)
				add(url.PathEscape(pw), minAlone)
			}
			add(url.PathEscape(user), minAlone)
		}
		add(u.Path, compound)
		add(u.EscapedPath(), compound)
		for _, seg := range strings.Split(u.Path, "/") {
			add(seg, minAlone)
			add(url.PathEscape(seg), minAlone)
		}
		if u.RawQuery != "" {
			add(u.RequestURI(), compound)
			add(u.RawQuery, compound)
			if q, err := url.QueryUnescape(u.RawQuery); err == nil {
				add(q, compound)
			}
			for _, vs := range u.Query() {
				for _, v := range vs {
					add(v, minAlone)
					add(url.QueryEscape(v), minAlone)
				}
			}
		}
		add(u.Fragment, compound)
	}
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(cmp.Compare(len(b), len(a)), strings.Compare(a, b)) })
	return slices.Compact(out)
}

// scrub replaces every piece in s by "...".
func scrub(s string, pieces []string) string {
	for _, p := range pieces {
		s = strings.ReplaceAll(s, p, "...")
	}
	return s
}
