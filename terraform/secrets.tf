# Secrets: the settings that must not sit in the services' configuration
# (readable by anyone with run.services.get), kept in Secret Manager and
# named in each function's TXFENCE_SECRETS (main.tf), which a process reads
# when it loads its configuration (shared/secrets):
#
#   txfence-chains                TXFENCE_CHAINS: the RPC URLs, which carry the
#                                 providers' API keys. Every function that
#                                 dials a chain (not the OutboxSweep).
#   txfence-stuck-webhook-secret  TXFENCE_STUCK_WEBHOOK_SECRET: the HMAC key of
#                                 the stuck-resolution webhook (only with
#                                 stuck_webhook_url). ResubmitSweep only.
#
# Each secret's value comes either from a sensitive variable (chains,
# stuck_webhook_secret), which terraform writes as a new version (so the
# value is in the terraform state: keep the state bucket private), or, with
# the variable left null, from the operators (gcloud secrets versions add,
# docs/deploy.md), in which case it never passes through terraform. Then
# the services exist before the secret has a version: Cloud Run's own
# secret variables would refuse to create them, which is why the processes
# read the secrets themselves. Until a version is added they answer 503 and
# try again at their next request.
#
# Each function's service account may read exactly the secrets
# local.function_secrets lists for it (roles/secretmanager.secretAccessor on
# the secret, not the project). A process reads version "latest" once, when
# it loads its configuration: a new version reaches new instances; roll a
# new revision (terraform apply after a change, or gcloud run services
# update) to reach all.

locals {
  # Secret ids by key (the keys local.function_secrets names).
  secrets = merge(
    { chains = "txfence-chains" },
    local.stuck_webhook_enabled ? { stuck_webhook = "txfence-stuck-webhook-secret" } : {},
  )

  # Who reads what: one binding per (function, secret).
  secret_accessor_bindings = merge([
    for k, secrets in local.function_secrets : {
      for env_name, key in secrets : "${k}/${key}" => { function = k, secret = key }
    }
  ]...)
}

resource "google_secret_manager_secret" "this" {
  for_each = local.secrets

  secret_id = each.value

  labels = {
    txfence = each.key
  }

  replication {
    auto {}
  }

  depends_on = [google_project_service.apis]
}

# Versions written from the sensitive variables (count, not for_each: a
# sensitive value may decide a count without being disclosed).
resource "google_secret_manager_secret_version" "chains" {
  count = var.chains == null ? 0 : 1

  secret      = google_secret_manager_secret.this["chains"].id
  secret_data = local.chains_env
}

resource "google_secret_manager_secret_version" "stuck_webhook" {
  count = local.stuck_webhook_enabled && var.stuck_webhook_secret != null ? 1 : 0

  secret      = google_secret_manager_secret.this["stuck_webhook"].id
  secret_data = var.stuck_webhook_secret
}

resource "google_secret_manager_secret_iam_member" "accessor" {
  for_each = local.secret_accessor_bindings

  secret_id = google_secret_manager_secret.this[each.value.secret].id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.runtime[each.value.function].email}"
}

# The first admin's API key: the admin job (run.tf) writes it as a version
# of this secret (roles/secretmanager.secretVersionAdder, on this secret
# only: it can add, not read); operators read it with
#   gcloud secrets versions access latest --secret=txfence-first-admin-key
# (as project owners, or with roles/secretmanager.secretAccessor on it).
resource "google_secret_manager_secret" "first_admin" {
  secret_id = "txfence-first-admin-key"

  labels = {
    txfence = "first_admin"
  }

  replication {
    auto {}
  }

  depends_on = [google_project_service.apis]
}

resource "google_secret_manager_secret_iam_member" "first_admin_writer" {
  secret_id = google_secret_manager_secret.first_admin.id
  role      = "roles/secretmanager.secretVersionAdder"
  member    = "serviceAccount:${google_service_account.runtime["admin"].email}"
}
