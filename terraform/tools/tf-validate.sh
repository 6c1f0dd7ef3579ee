#!/usr/bin/env bash
# tf-validate: terraform fmt -check, terraform validate and the plan tests
# (terraform test, tests/*.tftest.hcl) of every terraform root and module of
# this repository, offline, against the real schema of the google provider.
#
#   terraform/tools/tf-validate.sh               everything: fmt -check of terraform/,
#                                                validate of the module (terraform/)
#                                                and of each root (terraform/environments/*),
#                                                then the plan tests of each that has any
#   terraform/tools/tf-validate.sh DIR...        the same for these directories only
#                                                (tests use this)
#   terraform/tools/tf-validate.sh --build       only build (or find) the binaries
#   terraform/tools/tf-validate.sh --tools-ready exit 0 if the binaries are built
#
# Nothing is downloaded from a provider registry. The CLI is `terraform` when
# it is on PATH (TF_VALIDATE_CLI=tofu: OpenTofu regardless), else OpenTofu
# built from the Go module proxy
# (terraform/tools/tofu, its own module: it repeats OpenTofu's replace
# directive for its hcl fork). The google provider is built from the Go module
# proxy too (terraform/tools/provider-google) and handed to the CLI with
# dev_overrides in a generated CLI configuration (TF_CLI_CONFIG_FILE); no
# `init` runs (it would ask a registry about the overridden provider): `get`
# installs the local modules and `validate` loads that binary's schema.
# The plan tests run with `mock_provider "google"` (OpenTofu 1.8+, Terraform
# 1.7+): they plan against the provider's schema and validation without
# credentials or a project, so they run here too.
# dev_overrides skip the version check, so this script checks instead that
# every `version = "~> N.x"` constraint on hashicorp/google names the major
# version of the provider built (the first release heading of its
# CHANGELOG.md).
#
# Binaries are cached in $TF_TOOLS_DIR (default .tools/terraform, gitignored),
# keyed by the pinned version and a hash of the tools module's go.sum, so a
# rerun or a pin change is obvious and fast. A cold build takes minutes (the
# provider is large); the Go build cache makes later builds link-only.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tf_root=$repo/terraform
tools_src=$tf_root/tools
tools_dir=${TF_TOOLS_DIR:-$repo/.tools/terraform}
GO=${GO:-go}

say() { printf 'tf-validate: %s\n' "$*" >&2; }

# module_version MODULE_DIR PATH: the version MODULE_DIR's go.mod requires of PATH.
module_version() {
	awk -v p="$2" '$1 == p { print $2; exit } $1 == "require" && $2 == p { print $3; exit }' "$1/go.mod"
}

# cache_key MODULE_DIR PATH: version plus a hash of go.mod and go.sum.
cache_key() {
	local v
	v=$(module_version "$1" "$2")
	[ -n "$v" ] || { say "$1/go.mod does not require $2"; exit 2; }
	printf '%s-%s' "$v" "$(cat "$1/go.mod" "$1/go.sum" | sha256sum | cut -c1-12)"
}

tofu_pkg=github.com/opentofu/opentofu
google_pkg=github.com/hashicorp/terraform-provider-google
tofu_bin=$tools_dir/tofu-$(cache_key "$tools_src/tofu" "$tofu_pkg")/tofu
google_dir=$tools_dir/google-$(cache_key "$tools_src/provider-google" "$google_pkg")
google_bin=$google_dir/terraform-provider-google

# The CLI: terraform from PATH, else the cached OpenTofu
# (TF_VALIDATE_CLI=tofu forces OpenTofu, =terraform requires terraform).
case "${TF_VALIDATE_CLI:-auto}" in
auto | terraform)
	if command -v terraform >/dev/null 2>&1; then
		cli=$(command -v terraform)
		need_tofu=false
	elif [ "${TF_VALIDATE_CLI:-auto}" = terraform ]; then
		say "TF_VALIDATE_CLI=terraform but terraform is not on PATH"
		exit 2
	else
		cli=$tofu_bin
		need_tofu=true
	fi
	;;
tofu)
	cli=$tofu_bin
	need_tofu=true
	;;
*)
	say "TF_VALIDATE_CLI must be auto, terraform or tofu"
	exit 2
	;;
esac

tools_ready() {
	[ -x "$google_bin" ] && { ! $need_tofu || [ -x "$tofu_bin" ]; }
}

# build MODULE_DIR PACKAGE OUT: go build PACKAGE in MODULE_DIR, atomically.
build() {
	local start=$SECONDS tmp
	mkdir -p "$(dirname "$3")"
	tmp=$(mktemp "$3.XXXXXX")
	say "building $2 (module $(basename "$1")) into $3"
	(cd "$1" && GOFLAGS=-mod=readonly "$GO" build -trimpath -ldflags='-s -w' -o "$tmp" "$2")
	mv -f "$tmp" "$3"
	say "built $(basename "$3") in $((SECONDS - start))s"
}

build_tools() {
	if $need_tofu && [ ! -x "$tofu_bin" ]; then
		build "$tools_src/tofu" "$tofu_pkg/cmd/tofu" "$tofu_bin"
	fi
	if [ ! -x "$google_bin" ]; then
		build "$tools_src/provider-google" "$google_pkg" "$google_bin"
	fi
}

case "${1:-}" in
--tools-ready)
	tools_ready
	exit
	;;
--build)
	build_tools
	exit
	;;
esac

start=$SECONDS
build_tools

# The provider's major version, from the first release heading of the pinned
# module's CHANGELOG.md ("## 8.0.0 (August 26, 2026)").
google_mod_dir=$(cd "$tools_src/provider-google" && GOFLAGS=-mod=readonly "$GO" list -m -f '{{.Dir}}' "$google_pkg")
google_release=$(awk '/^## [0-9]+\.[0-9]+\.[0-9]+/ { print $2; exit }' "$google_mod_dir/CHANGELOG.md")
google_major=${google_release%%.*}
[ -n "$google_major" ] || { say "cannot read the release of $google_pkg from its CHANGELOG.md"; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat >"$work/cli.tfrc" <<EOF
# Generated by terraform/tools/tf-validate.sh: use the locally built google
# provider ($google_release) and install nothing.
provider_installation {
  dev_overrides {
    "hashicorp/google" = "$google_dir"
  }
}
EOF
export TF_CLI_CONFIG_FILE=$work/cli.tfrc
export CHECKPOINT_DISABLE=1 TF_IN_AUTOMATION=1 TF_INPUT=0
unset TF_WORKSPACE

if [ $# -gt 0 ]; then
	dirs=("$@")
	fmt_targets=("$@")
else
	dirs=("$tf_root")
	for d in "$tf_root"/environments/*/; do
		dirs+=("${d%/}")
	done
	fmt_targets=("$tf_root")
fi

fail=0

# Constraints on hashicorp/google must allow the major version validated.
for d in "${dirs[@]}"; do
	for f in "$d"/*.tf; do
		[ -e "$f" ] || continue
		while IFS= read -r c; do
			if [ "$c" != "$google_major" ]; then
				say "$f: hashicorp/google constraint ~> $c.x, but the provider validated is $google_release (terraform/tools/provider-google)"
				fail=1
			fi
		done < <(awk '/source *= *"hashicorp\/google"/ { g = 1; next }
			g && /version *= *"~> *[0-9]+/ { match($0, /~> *[0-9]+/); v = substr($0, RSTART, RLENGTH); gsub(/[^0-9]/, "", v); print v; g = 0 }
			/}/ { g = 0 }' "$f")
	done
done

say "$("$cli" version | head -1), google provider $google_release ($google_bin)"
for t in "${fmt_targets[@]}"; do
	if ! "$cli" fmt -check -recursive -diff -no-color "$t"; then
		say "fmt: $t is not formatted (run: terraform fmt -recursive $t)"
		fail=1
	fi
done

for d in "${dirs[@]}"; do
	name=${d#"$repo"/}
	export TF_DATA_DIR=$work/data/$(printf '%s' "$d" | sha256sum | cut -c1-12)
	# Modules only: `init` would look up the overridden provider in a
	# registry (and fail offline); with dev_overrides nothing else is needed.
	if ! out=$("$cli" -chdir="$d" get -no-color 2>&1); then
		printf '%s\n' "$out" >&2
		say "installing modules failed: $name"
		fail=1
		continue
	fi
	if "$cli" -chdir="$d" validate -no-color; then
		say "valid: $name"
	else
		say "INVALID: $name"
		fail=1
		continue
	fi
	# The plan tests, when the directory has any (tests/*.tftest.hcl).
	if compgen -G "$d/tests/*.tftest.hcl" >/dev/null; then
		if "$cli" -chdir="$d" test -no-color; then
			say "plan tests pass: $name"
		else
			say "PLAN TESTS FAIL: $name"
			fail=1
		fi
	fi
done

if [ $fail -ne 0 ]; then
	say "failed after $((SECONDS - start))s"
	exit 1
fi
say "ok: ${#dirs[@]} directories in $((SECONDS - start))s"
