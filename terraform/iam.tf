# Identities and what they may do, least privilege:
#
#   txfence-api, -submit, -receipt, -finality, -outbox, -resubmit   one per function
#   txfence-migrate                                       the migration job
#   txfence-admin                                         the admin job (the first
#       admin's API key, written to Secret Manager)
#   txfence-pusher                                        the caller identity of
#       Pub/Sub push and Cloud Scheduler: its OIDC tokens are what the
#       non-public services accept (roles/run.invoker on exactly those).
#   txfence-operator                                      the API's human
#       operators, by impersonation: their ID tokens (--include-email) name
#       it, and the first admin's API key is its.
#
# The only unconditioned project-wide grants are the two write-only
# telemetry roles of the functions (Cloud Monitoring metric writer, Cloud
# Trace agent: they exist only at the project level and read nothing). The
# two Cloud SQL roles are bound on the project but conditioned on txfence's
# instance (below), and everything else is granted on the one resource it
# concerns. Topic publisher
# grants are in pubsub.tf, KMS grants in kms.tf, Secret Manager grants in
# secrets.tf, invoker grants next to the services in run.tf.

locals {
  # Runtime identities: the functions plus the migrate and admin jobs.
  runtime_identities = merge(
    { for k, f in local.functions : k => f.description },
    {
      migrate = "txfence migration job (goose up): owns the database schema."
      admin   = "txfence admin job (functions/admin bootstrap): makes the first admin and writes its API key to Secret Manager."
    },
  )

  # Service account ids (6-30 characters).
  runtime_account_ids = {
    api      = "txfence-api"
    submit   = "txfence-submit"
    receipt  = "txfence-receipt"
    finality = "txfence-finality"
    outbox   = "txfence-outbox"
    resubmit = "txfence-resubmit"
    migrate  = "txfence-migrate"
    admin    = "txfence-admin"
  }
}

resource "google_service_account" "runtime" {
  for_each = local.runtime_identities

  account_id   = local.runtime_account_ids[each.key]
  display_name = "txfence ${each.key}"
  description  = substr(each.value, 0, 256)

  depends_on = [google_project_service.apis]
}

resource "google_service_account" "pusher" {
  account_id   = "txfence-pusher"
  display_name = "txfence pusher"
  description  = "Identity of Pub/Sub push deliveries and Cloud Scheduler calls to the txfence functions (OIDC tokens; run.invoker on those services only)."

  depends_on = [google_project_service.apis]
}

# The operators' identity on the API. A person's own Google ID token cannot
# carry the API's audience, so operators mint the token of this service
# account by impersonation (roles/iam.serviceAccountTokenCreator on it, for
# operator_members only):
#   gcloud auth print-identity-token --impersonate-service-account=EMAIL \
#     --audiences=API_OIDC_AUDIENCE --include-email
# (txfence refuses a token without the email claim). It may invoke the API
# (run.tf) and is the first admin's principal (the admin job), so its ID
# tokens and that API key are the same principal.
resource "google_service_account" "operator" {
  account_id   = "txfence-operator"
  display_name = "txfence operator"
  description  = "The identity txfence's operators call the API as, by impersonation (ID tokens), or with the first admin's API key."

  depends_on = [google_project_service.apis]
}

resource "google_service_account_iam_member" "operator_impersonators" {
  for_each = toset(var.operator_members)

  service_account_id = google_service_account.operator.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = each.value
}

# Cloud SQL: connect through the connector (cloudsql.client) and log in as the
# IAM database user (cloudsql.instanceUser). Both roles exist only at the
# project level, so each grant carries an IAM condition that limits it to
# txfence's instances (every shard's): another instance in the project
# stays out of reach. With one instance the condition is the one it always
# was, so that the bindings are not replaced.
locals {
  sql_role_bindings = {
    for pair in setproduct(keys(local.runtime_identities), ["roles/cloudsql.client", "roles/cloudsql.instanceUser"]) :
    "${pair[0]}/${pair[1]}" => { identity = pair[0], role = pair[1] }
  }

  sql_instance_names = [for k in local.shard_keys : local.db_instances[k].name]
  sql_condition = length(local.sql_instance_names) == 1 ? {
    title       = "txfence instance only"
    description = "Only the Cloud SQL instance ${local.sql_instance_names[0]}."
    expression  = "resource.type == 'sqladmin.googleapis.com/Instance' && resource.name == 'projects/${var.project}/instances/${local.sql_instance_names[0]}'"
    } : {
    title       = "txfence instances only"
    description = "Only the Cloud SQL instances of txfence's shards: ${join(", ", local.sql_instance_names)}."
    expression  = "resource.type == 'sqladmin.googleapis.com/Instance' && (${join(" || ", [for n in local.sql_instance_names : "resource.name == 'projects/${var.project}/instances/${n}'"])})"
  }
}

resource "google_project_iam_member" "sql" {
  for_each = local.sql_role_bindings

  project = var.project
  role    = each.value.role
  member  = "serviceAccount:${google_service_account.runtime[each.value.identity].email}"

  condition {
    title       = local.sql_condition.title
    description = local.sql_condition.description
    expression  = local.sql_condition.expression
  }
}

# Telemetry (shared/telemetry, TXFENCE_TELEMETRY=gcp): each function writes
# its metrics to Cloud Monitoring and its spans to Cloud Trace. The migrate
# job exports nothing.
locals {
  telemetry_role_bindings = {
    for pair in setproduct(keys(local.functions), ["roles/monitoring.metricWriter", "roles/cloudtrace.agent"]) :
    "${pair[0]}/${pair[1]}" => { identity = pair[0], role = pair[1] }
  }
}

resource "google_project_iam_member" "telemetry" {
  for_each = local.telemetry_role_bindings

  project = var.project
  role    = each.value.role
  member  = "serviceAccount:${google_service_account.runtime[each.value.identity].email}"
}

# Pub/Sub push with OIDC: the Pub/Sub service agent mints the pusher's
# tokens, so it needs token-creator on that one service account (required
# for projects created before April 2021, harmless after).
locals {
  pubsub_service_agent = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
}

resource "google_service_account_iam_member" "pubsub_agent_mints_pusher_tokens" {
  service_account_id = google_service_account.pusher.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_service_agent

  depends_on = [google_project_service.apis]
}

# CI/CD: the identity running cloudbuild.yaml, scoped to what it does:
# update and execute the migrate job, update each function's service (each
# binding on that resource, not run.developer on the project), and act as
# the service accounts those run as, because deploying a revision is acting
# as its account: Submit's and ResubmitSweep's, which may sign, are among
# them, since their services are deployed too; the admin job's, the
# pusher's and the operators' are not (CI never deploys as them). Plus
# writing images to the repository the image variable names, seeing
# earlier builds (cloudbuild.yaml's serialize step) and writing its logs.
locals {
  deployer        = var.deployer_service_account != "" ? "serviceAccount:${var.deployer_service_account}" : ""
  deployed_by_ci  = concat(keys(local.functions), ["migrate"])
  deployer_enable = var.deployer_service_account != ""

  # REGION-docker.pkg.dev/PROJECT/REPOSITORY/IMAGE[:TAG|@DIGEST]
  image_repository = try(regex("^([a-z0-9-]+)-docker\\.pkg\\.dev/([^/]+)/([^/]+)/", var.image), null)
}

resource "google_cloud_run_v2_service_iam_member" "deployer" {
  for_each = local.deployer_enable ? local.functions : {}

  project  = var.project
  location = var.region
  name     = google_cloud_run_v2_service.fn[each.key].name
  role     = "roles/run.developer"
  member   = local.deployer
}

resource "google_cloud_run_v2_job_iam_member" "deployer_migrate" {
  count = local.deployer_enable ? 1 : 0

  project  = var.project
  location = var.region
  name     = google_cloud_run_v2_job.migrate.name
  role     = "roles/run.developer"
  member   = local.deployer
}

resource "google_service_account_iam_member" "deployer_acts_as" {
  for_each = local.deployer_enable ? toset(local.deployed_by_ci) : toset([])

  service_account_id = google_service_account.runtime[each.key].name
  role               = "roles/iam.serviceAccountUser"
  member             = local.deployer
}

resource "google_artifact_registry_repository_iam_member" "deployer_writes_images" {
  count = local.deployer_enable && local.image_repository != null ? 1 : 0

  project    = local.image_repository[1]
  location   = local.image_repository[0]
  repository = local.image_repository[2]
  role       = "roles/artifactregistry.writer"
  member     = local.deployer
}

resource "google_project_iam_member" "deployer_project" {
  for_each = local.deployer_enable ? toset(["roles/cloudbuild.builds.viewer", "roles/logging.logWriter"]) : toset([])

  project = var.project
  role    = each.value
  member  = local.deployer
}
