package deps

// The topics, by the keys terraform gives them (local.topics), whose
// outbox rows a function writes and publishes itself.
const (
	TopicSubmit     = "submit"
	TopicReceipt    = "receipt"
	TopicCompletion = "completion"
)

// Publishes lists, for each function (its FUNCTION_TARGET), every topic it
// publishes to: what its service account must be allowed to publish to
// (terraform/main.tf, local.functions[*].publishes, which a test compares
// with this list). A function publishes the outbox rows it wrote:
//
//   - Api: the submit prompt of each allocation.
//   - Submit: the receipt prompt of what it broadcast, the outcome of what
//     it marked STUCK, and a submit prompt of its own when it hands a
//     signer's drain on (at the end of its budget, after giving its lease
//     to a waiter, or when a STUCK transaction that held later nonces
//     was broadcast).
//   - Receipt: a submit prompt when what it marked MINED freed room.
//   - The sweeps: every kind (the finality sweep marks MINED, reopens
//     reorged transactions and writes outcomes; the resubmit sweep
//     rebroadcasts, reports STUCK and re-prompts stranded work; the outbox
//     sweep relays anyone's rows).
var Publishes = map[string][]string{
	"Api":           {TopicSubmit},
	"Submit":        {TopicSubmit, TopicReceipt, TopicCompletion},
	"Receipt":       {TopicSubmit},
	"FinalitySweep": {TopicSubmit, TopicReceipt, TopicCompletion},
	"OutboxSweep":   {TopicSubmit, TopicReceipt, TopicCompletion},
	"ResubmitSweep": {TopicSubmit, TopicReceipt, TopicCompletion},
}
