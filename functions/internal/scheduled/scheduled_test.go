package scheduled

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/logging"
)

func TestServe(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		status int
	}{{"success", nil, http.StatusOK}, {"failure", errors.New("node down"), http.StatusInternalServerError}} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			Serve(rec, httptest.NewRequest(http.MethodPost, "/FinalitySweep", nil), logging.Discard(), "sweep",
				func(context.Context) (any, error) { return map[string]int{"confirmed": 3}, tc.err })
			assert.Equal(t, tc.status, rec.Code)
			var body map[string]any
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
			assert.Equal(t, map[string]any{"confirmed": float64(3)}, body["stats"])
			if tc.err != nil {
				assert.Equal(t, "node down", body["error"])
			}
		})
	}
}
