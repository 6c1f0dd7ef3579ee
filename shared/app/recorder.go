package app

import "github.com/txfence/txfence/shared/txm"

// recorderOr is r, or txm.NopRecorder when r is nil: a use case built
// without a recorder is not measured.
func recorderOr(r txm.Recorder) txm.Recorder {
	if r == nil {
		return txm.NopRecorder{}
	}
	return r
}
