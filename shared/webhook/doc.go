// Package webhook is the stuck-resolution policy that asks an HTTP endpoint:
// a txm.StuckResolutionHook (Client) and, for services written in Go, the
// receiving end (NewReceiver).
//
// # Wire contract
//
// For each STUCK transaction whose backoff is due, txfence sends
//
//	POST <URL>
//	Content-Type: application/json
//	X-Txfence-Timestamp: <unix seconds>
//	X-Txfence-Signature: v1=<hex HMAC-SHA256(secret, timestamp + "." + body)>
//	X-Txfence-Delivery: <random id, also the body's deliveryId>
//
//	{"deliveryId":"…","txId":"…","chainId":1,"signer":"0x…","nonce":7,
//	 "to":"0x…","value":"0","requestId":"…","subState":"fee_cap_reached",
//	 "lastError":"…","attempts":3,
//	 "latestFees":{"maxFeePerGas":"…","maxPriorityFeePerGas":"…"},
//	 "baseFee":"…","failures":4,"createdAt":"2025-01-02T03:04:05Z",
//	 "stuckSince":"2025-01-02T03:34:05Z","chainNonce":6,"feeCapsLeft":false}
//
// (see Request for every field) and expects
//
//	200 OK
//	X-Txfence-Timestamp: <unix seconds>
//	X-Txfence-Signature: v1=<hex HMAC-SHA256(secret, timestamp + "." + body)>
//
//	{"action":"noop|bump|cancel|placeholder","reason":"free text",
//	 "deliveryId":"<the request's>","txId":"<the request's>"}
//
// The answer's deliveryId and txId are required and must be the request's:
// a signature holds for five minutes, and these two, inside the signed
// body, keep an answer captured from one exchange from being replayed for
// another delivery or another transaction. txfence refuses (ErrRefused) an
// answer whose signature does not verify, whose timestamp is more than five
// minutes (MaxAge) from its clock, either way, or whose deliveryId or txId
// is missing or not the request's; and it finds unusable (ErrBadAnswer) one
// with a non-2xx status, a body over 64 KiB, JSON that does not parse or an
// unknown action. A refused answer,
// like a timeout, means no decision: the transaction's default work goes on
// and nothing else changes. Redirects are not followed.
//
// While rotating the secret, a receiver may sign with both the old and the
// new one, comma-separated: "v1=<old>,v1=<new>". Verify accepts a message
// when any v1 value matches.
//
// The secret never appears in an error or a log line, nor does the URL's
// path or query (it may carry a key): the endpoint is named by scheme and
// host.
//
// # Receiving in Go
//
// NewReceiver checks the signature and the timestamp, refuses replays and
// signs the answer:
//
//	secret := []byte(os.Getenv("TXFENCE_STUCK_WEBHOOK_SECRET"))
//	http.Handle("POST /txfence/stuck", webhook.NewReceiver(secret,
//		func(ctx context.Context, t webhook.Request) (webhook.Answer, error) {
//			if t.SubState == txm.SubStateFeeCapReached && t.Failures > 10 {
//				return webhook.Answer{Action: txm.ActionCancel, Reason: "fees capped for too long"}, nil
//			}
//			return webhook.Answer{Action: txm.ActionBump, Reason: "keep trying"}, nil
//		}))
package webhook
