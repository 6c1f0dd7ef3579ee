# The google provider, mocked: no credentials, no project. Computed
# attributes that the provider checks or the module parses get realistic
# values (OpenTofu fills computed attributes at plan time and runs the
# provider's validation on them). OpenTofu has no shared mock files, so every
# file of tests/ repeats this block.
mock_provider "google" {
  mock_resource "google_service_account" {
    defaults = {
      name   = "projects/p/serviceAccounts/txfence-mock@p.iam.gserviceaccount.com"
      email  = "txfence-mock@p.iam.gserviceaccount.com"
      member = "serviceAccount:txfence-mock@p.iam.gserviceaccount.com"
    }
  }
  mock_resource "google_compute_network" {
    defaults = {
      id        = "projects/p/global/networks/txfence"
      self_link = "https://www.googleapis.com/compute/v1/projects/p/global/networks/txfence"
    }
  }
  mock_resource "google_compute_subnetwork" {
    defaults = {
      id = "projects/p/regions/us-central1/subnetworks/txfence-run"
    }
  }
  mock_resource "google_secret_manager_secret" {
    defaults = {
      id   = "projects/p/secrets/txfence-chains"
      name = "projects/123/secrets/txfence-chains"
    }
  }
  mock_resource "google_pubsub_topic" {
    defaults = {
      id = "projects/p/topics/txfence-submit"
    }
  }
  mock_resource "google_cloud_run_v2_service" {
    defaults = {
      uri = "https://txfence-x-123.us-central1.run.app"
    }
  }
  mock_resource "google_sql_database_instance" {
    defaults = {
      connection_name    = "p:us-central1:txfence"
      private_ip_address = "10.1.0.3"
    }
  }
  mock_data "google_project" {
    defaults = {
      number = "123456789012"
    }
  }
}

variables {
  project             = "p"
  image               = "us-central1-docker.pkg.dev/p/txfence/txfence:abc1234"
  api_invoker_members = ["serviceAccount:caller@p.iam.gserviceaccount.com"]
}

# Each function may publish to every topic it writes outbox rows for and
# publishes to itself (functions/*, shared/app; the Go test of the
# functions' topic list compares the code with local.functions): Api
# prompts Submit; Submit prompts Receipt, reports outcomes and re-prompts
# itself at the end of its budget and after a lease hand-over; Receipt
# prompts Submit; the three sweeps publish everything.
run "publisher_grants_cover_what_each_function_publishes" {
  command = plan

  assert {
    condition = length(setsubtract([
      "api/submit",
      "submit/submit", "submit/receipt", "submit/completion",
      "receipt/submit",
      "finality/submit", "finality/receipt", "finality/completion",
      "outbox/submit", "outbox/receipt", "outbox/completion",
      "resubmit/submit", "resubmit/receipt", "resubmit/completion",
    ], keys(google_pubsub_topic_iam_member.publisher))) == 0
    error_message = "A function lacks roles/pubsub.publisher on a topic it publishes to (its publish gets PermissionDenied and is only logged): ${join(", ", setsubtract(["api/submit", "submit/submit", "submit/receipt", "submit/completion", "receipt/submit", "finality/submit", "finality/receipt", "finality/completion", "outbox/submit", "outbox/receipt", "outbox/completion", "resubmit/submit", "resubmit/receipt", "resubmit/completion"], keys(google_pubsub_topic_iam_member.publisher)))} missing."
  }

  assert {
    condition = alltrue([
      for k, b in google_pubsub_topic_iam_member.publisher :
      b.role == "roles/pubsub.publisher" && b.topic == local.topics[split("/", k)[1]]
    ])
    error_message = "Each publisher grant is roles/pubsub.publisher on the topic its key names."
  }
}

# Secrets reach exactly the functions that use them: the RPC URLs (and
# their providers' keys) every function that dials a chain, not the
# OutboxSweep, which only relays the outbox and is told it dials none.
run "secrets_only_where_used" {
  command = apply

  assert {
    condition     = toset([for k, b in google_secret_manager_secret_iam_member.accessor : b.role if b.secret_id == google_secret_manager_secret.this["chains"].id]) == toset(["roles/secretmanager.secretAccessor"])
    error_message = "The chains secret is read through roles/secretmanager.secretAccessor on the secret."
  }

  assert {
    condition     = toset([for k, b in google_secret_manager_secret_iam_member.accessor : split("/", k)[0] if split("/", k)[1] == "chains"]) == toset(["api", "submit", "receipt", "finality", "resubmit"])
    error_message = "Only the functions that dial the chains may read txfence-chains (not the OutboxSweep)."
  }

  assert {
    condition = (
      contains([for e in google_cloud_run_v2_service.fn["outbox"].template[0].containers[0].env : "${e.name}=${e.value}" if e.value != null], "TXFENCE_CHAINS=none") &&
      length([for e in google_cloud_run_v2_service.fn["outbox"].template[0].containers[0].env : e if e.value_source != null && length(e.value_source) > 0]) == 0
    )
    error_message = "The OutboxSweep gets TXFENCE_CHAINS=none and no secret."
  }
}

# The CI identity (cloudbuild.yaml) may do what the pipeline does and no
# more: run.developer on each service and on the migrate job, never on the
# project; act-as on the service accounts of what it deploys (the six
# functions, the signing ones included because their services are
# deployed, and the migrate job), never on the admin job's, the pusher's
# or the operators'; images to the image's own repository.
run "ci_identity_is_scoped" {
  command = plan

  variables {
    deployer_service_account = "txfence-ci@p.iam.gserviceaccount.com"
  }

  assert {
    condition     = length([for k, b in google_project_iam_member.deployer_project : b.role if !contains(["roles/cloudbuild.builds.viewer", "roles/logging.logWriter"], b.role)]) == 0
    error_message = "The CI identity's only project-wide roles are the read-only build viewer and the log writer (no run.developer on the project)."
  }

  assert {
    condition     = toset(keys(google_cloud_run_v2_service_iam_member.deployer)) == toset(keys(local.functions)) && alltrue([for k, b in google_cloud_run_v2_service_iam_member.deployer : b.role == "roles/run.developer" && b.member == "serviceAccount:txfence-ci@p.iam.gserviceaccount.com"])
    error_message = "The CI identity has run.developer on each function's service."
  }

  assert {
    condition     = length(google_cloud_run_v2_job_iam_member.deployer_migrate) == 1 && google_cloud_run_v2_job_iam_member.deployer_migrate[0].role == "roles/run.developer"
    error_message = "The CI identity may update and execute the migrate job."
  }

  assert {
    condition     = toset(keys(google_service_account_iam_member.deployer_acts_as)) == toset(["api", "submit", "receipt", "finality", "outbox", "resubmit", "migrate"])
    error_message = "The CI identity acts as exactly the service accounts of the services and job it deploys: not the admin job's."
  }

  assert {
    condition     = length(google_artifact_registry_repository_iam_member.deployer_writes_images) == 1 && google_artifact_registry_repository_iam_member.deployer_writes_images[0].repository == "txfence" && google_artifact_registry_repository_iam_member.deployer_writes_images[0].location == "us-central1"
    error_message = "The CI identity writes images to the image's repository only."
  }
}
