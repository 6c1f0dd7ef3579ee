// Package secrets reads and writes Google Secret Manager secret versions:
// the settings a deployment keeps out of its services' configuration
// (TXFENCE_SECRETS names them, and a process reads them when it loads its
// configuration), and the first admin's API key, which the admin job writes
// there instead of to its logs.
package secrets

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
	secretmanager "google.golang.org/api/secretmanager/v1"
)

var (
	// ErrNoVersion means the secret (or the version asked for) does not
	// exist, or is disabled or destroyed: nothing to read yet.
	ErrNoVersion = errors.New("no such secret version")
	// ErrDenied means the caller may not read or write the secret.
	ErrDenied = errors.New("permission denied on the secret")
)

// Client talks to Secret Manager with Application Default Credentials (the
// runtime service account on Cloud Run).
type Client struct {
	svc *secretmanager.Service
}

// New returns a client; opts are for tests (an endpoint, no
// authentication).
func New(ctx context.Context, opts ...option.ClientOption) (*Client, error) {
	svc, err := secretmanager.NewService(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("secret manager: %w", err)
	}
	return &Client{svc: svc}, nil
}

var (
	versionName = regexp.MustCompile(`^projects/[^/]+/secrets/[^/]+/versions/[^/]+$`)
	secretName  = regexp.MustCompile(`^projects/[^/]+/secrets/[^/]+$`)
)

// Access returns the data of version (projects/P/secrets/S/versions/V, V a
// number or latest).
func (c *Client) Access(ctx context.Context, version string) ([]byte, error) {
	if !versionName.MatchString(version) {
		return nil, fmt.Errorf("secret version %q must be projects/PROJECT/secrets/SECRET/versions/VERSION", version)
	}
	resp, err := c.svc.Projects.Secrets.Versions.Access(version).Context(ctx).Do()
	if err != nil {
		return nil, fmt.Errorf("access %s: %w", version, translate(err))
	}
	if resp.Payload == nil {
		return nil, nil
	}
	data, err := base64.StdEncoding.DecodeString(resp.Payload.Data)
	if err != nil {
		return nil, fmt.Errorf("access %s: the payload is not base64", version)
	}
	return data, nil
}

// AddVersion writes data as a new version of secret (projects/P/secrets/S)
// and returns the version's name.
func (c *Client) AddVersion(ctx context.Context, secret string, data []byte) (string, error) {
	if !secretName.MatchString(secret) {
		return "", fmt.Errorf("secret %q must be projects/PROJECT/secrets/SECRET", secret)
	}
	v, err := c.svc.Projects.Secrets.AddVersion(secret, &secretmanager.AddSecretVersionRequest{
		Payload: &secretmanager.SecretPayload{Data: base64.StdEncoding.EncodeToString(data)},
	}).Context(ctx).Do()
	if err != nil {
		return "", fmt.Errorf("add a version to %s: %w", secret, translate(err))
	}
	return v.Name, nil
}

// translate maps Secret Manager's answers to the package's errors; others
// keep their status, never a payload (requests carry none back).
func translate(err error) error {
	var gerr *googleapi.Error
	if errors.As(err, &gerr) {
		switch {
		case gerr.Code == http.StatusNotFound,
			gerr.Code == http.StatusBadRequest && strings.Contains(gerr.Message, "DISABLED"),
			gerr.Code == http.StatusBadRequest && strings.Contains(gerr.Message, "DESTROYED"),
			gerr.Code == http.StatusPreconditionFailed:
			return ErrNoVersion
		case gerr.Code == http.StatusForbidden, gerr.Code == http.StatusUnauthorized:
			return ErrDenied
		}
		return fmt.Errorf("secret manager answered %d", gerr.Code)
	}
	return err
}
