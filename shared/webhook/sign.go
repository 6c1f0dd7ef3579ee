package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Header names. Both directions carry the timestamp and the signature; the
// request also carries the delivery id.
const (
	// HeaderTimestamp is the signing time in unix seconds, in decimal.
	HeaderTimestamp = "X-Txfence-Timestamp"
	// HeaderSignature is "v1=" followed by the hex HMAC-SHA256, keyed with the
	// shared secret, of the timestamp, a dot and the body. A receiver may
	// send several comma-separated values while it rotates its secret.
	HeaderSignature = "X-Txfence-Signature"
	// HeaderDelivery is the request's random id; the same value is in the
	// signed body as deliveryId.
	HeaderDelivery = "X-Txfence-Delivery"
)

// MaxAge is how far a signed message's timestamp may be from now, in
// either direction, for txfence and for the Receiver to accept it.
const MaxAge = 5 * time.Minute

// signatureScheme prefixes every signature value this version writes and
// reads; values of other schemes are ignored.
const signatureScheme = "v1="

// Sentinel errors.
var (
	// ErrRefused means a signed message was not accepted: the signature is
	// missing, malformed or does not match, or the timestamp is missing,
	// malformed or outside the allowed window. Every error Verify returns
	// wraps it.
	ErrRefused = errors.New("refused")

	// ErrBadAnswer means the webhook answered, but not with a usable
	// decision: a non-2xx status, a body over the limit, JSON that does not
	// parse or an action txfence does not know.
	ErrBadAnswer = errors.New("bad answer")
)

// Sign signs body at now with secret. It returns the values of the
// X-Txfence-Timestamp and X-Txfence-Signature headers.
func Sign(secret []byte, body []byte, now time.Time) (timestamp, signature string) {
	timestamp = strconv.FormatInt(now.Unix(), 10)
	return timestamp, signatureScheme + hex.EncodeToString(mac(secret, timestamp, body))
}

// Verify checks that signature (an X-Txfence-Signature value, possibly
// several comma-separated "v1=" values) holds a valid HMAC of timestamp and
// body under secret, and that timestamp is at most maxAge before or after
// now. Every error wraps ErrRefused and says what was wrong; none quotes the
// secret.
func Verify(secret []byte, timestamp, signature string, body []byte, now time.Time, maxAge time.Duration) error {
	switch {
	case len(secret) == 0:
		return fmt.Errorf("%w: no secret to verify with", ErrRefused)
	case maxAge <= 0:
		return fmt.Errorf("%w: max age must be positive", ErrRefused)
	case timestamp == "":
		return fmt.Errorf("%w: missing %s", ErrRefused, HeaderTimestamp)
	case signature == "":
		return fmt.Errorf("%w: missing %s", ErrRefused, HeaderSignature)
	}
	unix, err := parseUnix(timestamp)
	if err != nil {
		return fmt.Errorf("%w: %s is not unix seconds", ErrRefused, HeaderTimestamp)
	}

	want := mac(secret, timestamp, body)
	sawV1, match := false, false
	for _, v := range strings.Split(signature, ",") {
		hexMAC, ok := strings.CutPrefix(strings.TrimSpace(v), signatureScheme)
		if !ok {
			continue
		}
		sawV1 = true
		got, err := hex.DecodeString(hexMAC)
		if err != nil {
			continue
		}
		// Compare every value, not only up to the first match, so the time
		// taken does not say which one matched.
		if hmac.Equal(got, want) {
			match = true
		}
	}
	switch {
	case !sawV1:
		return fmt.Errorf("%w: %s has no %s value", ErrRefused, HeaderSignature, strings.TrimSuffix(signatureScheme, "="))
	case !match:
		return fmt.Errorf("%w: signature does not match", ErrRefused)
	}

	// time.Time.Sub saturates, so absurd timestamps compare correctly.
	signed := time.Unix(unix, 0)
	switch {
	case now.Sub(signed) > maxAge:
		return fmt.Errorf("%w: timestamp is %s old, more than %s", ErrRefused, now.Sub(signed).Truncate(time.Second), maxAge)
	case signed.Sub(now) > maxAge:
		return fmt.Errorf("%w: timestamp is %s in the future, more than %s", ErrRefused, signed.Sub(now).Truncate(time.Second), maxAge)
	}
	return nil
}

// mac is HMAC-SHA256(secret, timestamp + "." + body).
func mac(secret []byte, timestamp string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(timestamp))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// parseUnix reads unix seconds written as 1 to 19 ASCII digits: no sign,
// no spaces, no fraction.
func parseUnix(s string) (int64, error) {
	if len(s) == 0 || len(s) > 19 {
		return 0, errors.New("bad length")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("not a digit")
		}
	}
	return strconv.ParseInt(s, 10, 64)
}
