package evm

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/txfence/txfence/shared/txm"
)

// referenceRule is a rule of the classifier read independently: each pattern
// as a regular expression that requires a non-word byte (or the start)
// before it.
type referenceRule struct {
	reason   txm.BroadcastReason
	patterns []*regexp.Regexp
}

func referenceRules() []referenceRule {
	out := make([]referenceRule, len(rules))
	for i, r := range rules {
		out[i].reason = r.reason
		for _, p := range r.patterns {
			out[i].patterns = append(out[i].patterns, regexp.MustCompile(`(?:^|[^a-z0-9])`+regexp.QuoteMeta(p)))
		}
	}
	return out
}

// referenceClassify is the rank and reason of the first rule with a pattern
// at a word start of the lower-cased text; len(rules) and ReasonTransient
// when none has.
func referenceClassify(ref []referenceRule, text string) (int, txm.BroadcastReason) {
	lower := strings.ToLower(text)
	for i, r := range ref {
		for _, p := range r.patterns {
			if p.MatchString(lower) {
				return i, r.reason
			}
		}
	}
	return len(ref), txm.ReasonTransient
}

// FuzzClassify: Classify never panics on any error text, alone, as a node's
// JSON-RPC error or wrapped; its answer is the first rule (in order) with a
// pattern at a word start; and a text given a known pattern at a word start
// keeps that pattern's class, unless it also holds a pattern of a rule that
// comes first (the more specific reading wins, by design).
func FuzzClassify(f *testing.F) {
	for _, c := range classificationCases {
		f.Add(c.msg, uint16(0), "")
	}
	ref := referenceRules()
	var patterns []struct {
		rank int
		text string
	}
	for i, r := range rules {
		for _, p := range r.patterns {
			patterns = append(patterns, struct {
				rank int
				text string
			}{i, p})
		}
	}
	f.Fuzz(func(t *testing.T, text string, pick uint16, tail string) {
		check := func(text string) (int, txm.BroadcastReason) {
			rank, want := referenceClassify(ref, text)
			for _, err := range []error{
				errors.New(text),
				&rpcError{code: -32000, message: text},
				fmt.Errorf("send raw transaction: %w", &rpcError{code: -32003, message: text}),
			} {
				if got := Classify(err); got != want {
					t.Fatalf("Classify(%T %q) = %s, want %s", err, err.Error(), got, want)
				}
				var be *txm.BroadcastError
				if !errors.As(ClassifyBroadcast(err), &be) || be.Reason != want {
					t.Fatalf("ClassifyBroadcast(%q) does not carry %s", err.Error(), want)
				}
				_ = insufficientFunds(err)
				_ = methodMissing(err)
			}
			return rank, want
		}
		check(text)

		// The pattern's rule, or one before it that the text also matches.
		p := patterns[int(pick)%len(patterns)]
		composed := text + " " + p.text + tail
		if rank, got := check(composed); rank > p.rank {
			t.Fatalf("%q holds %q at a word start but classifies as %s (rule %d), after its rule %d", composed, p.text, got, rank, p.rank)
		}
	})
}
