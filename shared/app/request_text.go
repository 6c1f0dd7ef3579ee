package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxMetadataDepth bounds how deeply metadata may nest: deeper documents are
// no one's bookkeeping, and each level costs the database a stack frame.
const maxMetadataDepth = 32

// textProblem says why s is no request id: it must be UTF-8 text without
// control characters (PostgreSQL's text refuses invalid UTF-8 and NUL; a
// control character in an identifier only ever hides something). "" when
// s is fine.
func textProblem(s string) string {
	if !utf8.ValidString(s) {
		return "must be UTF-8 text"
	}
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return "must not hold control characters"
	}
	return ""
}

// metadataProblem says why raw cannot be stored as a transaction's metadata
// (PostgreSQL jsonb): a NUL character (\u0000) in a string or key, a number
// beyond a double's range, or nesting deeper than maxMetadataDepth. "" when
// it can. raw is already known to be one JSON object.
func metadataProblem(raw json.RawMessage) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	depth := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return ""
		}
		if err != nil {
			return "must be a JSON object"
		}
		switch tok := tok.(type) {
		case json.Delim:
			if tok == '{' || tok == '[' {
				if depth++; depth > maxMetadataDepth {
					return "must nest at most " + strconv.Itoa(maxMetadataDepth) + " levels deep"
				}
			} else {
				depth--
			}
		case string:
			if strings.ContainsRune(tok, 0) {
				return "must not hold the NUL character (\\u0000)"
			}
		case json.Number:
			if _, err := strconv.ParseFloat(string(tok), 64); err != nil {
				return "numbers must be within the range of a double, got " + truncate(string(tok), 32)
			}
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
