package secrets

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// EnvSecrets names the settings a process reads from Secret Manager when it
// loads its configuration: NAME=projects/P/secrets/S/versions/V, comma
// separated, NAME a TXFENCE_ variable. terraform sets it instead of Cloud
// Run's secret environment variables, whose versions must exist before a
// service can be created: a secret whose versions the operators add
// themselves (so that its value never passes through terraform) may then
// get its first version after the services exist, and a process whose
// configuration could not be loaded tries again at its next request.
const EnvSecrets = "TXFENCE_SECRETS"

// Accessor reads one secret version's data (*Client does).
type Accessor interface {
	Access(ctx context.Context, version string) ([]byte, error)
}

var settingName = regexp.MustCompile(`^TXFENCE_[A-Z0-9_]+$`)

// Lookup returns env with the settings spec names read from Secret
// Manager through a. A setting given both ways, a malformed spec or a
// version that cannot be read is an error naming the setting and the
// secret, never a value.
func Lookup(ctx context.Context, a Accessor, spec string, env func(string) (string, bool)) (func(string) (string, bool), error) {
	values := map[string]string{}
	seen := map[string]bool{}
	var problems []string
	for _, entry := range strings.Split(spec, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, version, ok := strings.Cut(entry, "=")
		name, version = strings.TrimSpace(name), strings.TrimSpace(version)
		switch {
		case !ok || !settingName.MatchString(name) || !versionName.MatchString(version):
			problems = append(problems, fmt.Sprintf("%s: entry %q must be TXFENCE_NAME=projects/PROJECT/secrets/SECRET/versions/VERSION", EnvSecrets, entry))
			continue
		case seen[name]:
			problems = append(problems, fmt.Sprintf("%s: %s is listed twice", EnvSecrets, name))
			continue
		}
		seen[name] = true
		if v, set := env(name); set && v != "" {
			problems = append(problems, fmt.Sprintf("%s is set both directly and in %s: keep one", name, EnvSecrets))
			continue
		}
		data, err := a.Access(ctx, version)
		secret := version[:strings.LastIndex(version, "/versions/")]
		switch {
		case errors.Is(err, ErrNoVersion):
			problems = append(problems, fmt.Sprintf("%s: secret %s has no version to read yet (add one: gcloud secrets versions add %s --data-file=-)", name, secret, secret[strings.LastIndex(secret, "/")+1:]))
			continue
		case errors.Is(err, ErrDenied):
			problems = append(problems, fmt.Sprintf("%s: this service account may not read %s (roles/secretmanager.secretAccessor on the secret)", name, secret))
			continue
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		values[name] = string(data)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("settings from Secret Manager: %s", strings.Join(problems, "; "))
	}
	return func(k string) (string, bool) {
		if v, ok := values[k]; ok {
			return v, true
		}
		return env(k)
	}, nil
}
