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

# Both environments plan as their examples configure them.
run "dev_plans" {
  command = plan
  module {
    source = "./environments/dev"
  }
  variables {
    project             = "my-project-dev"
    image               = "us-central1-docker.pkg.dev/my-project-dev/txfence/txfence:abc1234"
    api_invoker_members = ["user:you@example.com"]
  }
}

run "prod_plans" {
  command = plan
  module {
    source = "./environments/prod"
  }
  variables {
    project               = "my-project"
    image                 = "us-central1-docker.pkg.dev/my-project/txfence/txfence:abc1234"
    api_domain            = "txfence.example.com"
    api_invoker_members   = ["allUsers"]
    notification_channels = ["projects/my-project/notificationChannels/1234567890"]
  }
}

# Prod with the RPC keys kept out of terraform (chains = null: the
# operators add txfence-chains' versions themselves, after the apply):
# nothing may need a version of it before the services exist. Cloud Run
# refuses to create a revision whose secret variable has no version, so no
# service has one: each names its secrets in TXFENCE_SECRETS and reads
# them when it loads its configuration. Planned and applied (mocked) with
# prod's settings.
run "prod_without_chains_applies" {
  command = apply

  variables {
    project                = "my-project"
    image                  = "us-central1-docker.pkg.dev/my-project/txfence/txfence:abc1234"
    chains                 = null
    api_domain             = "txfence.example.com"
    api_invoker_members    = ["allUsers"]
    db_availability_type   = "REGIONAL"
    db_deletion_protection = true
    min_instances          = { api = 2 }
  }

  assert {
    condition     = length(google_secret_manager_secret_version.chains) == 0
    error_message = "With chains = null terraform writes no version of txfence-chains (the value never passes through it)."
  }

  assert {
    condition = alltrue(flatten([
      for k, svc in google_cloud_run_v2_service.fn : [
        for e in svc.template[0].containers[0].env : length(e.value_source) == 0
      ]
    ]))
    error_message = "No service takes a Cloud Run secret variable: its creation would fail while the secret has no version."
  }

  assert {
    condition = alltrue([
      for k in ["api", "submit", "receipt", "finality", "resubmit"] :
      contains([for e in google_cloud_run_v2_service.fn[k].template[0].containers[0].env : "${e.name}=${e.value}" if e.value != null], "TXFENCE_SECRETS=TXFENCE_CHAINS=${google_secret_manager_secret.this["chains"].id}/versions/latest")
    ])
    error_message = "The functions that dial chains name txfence-chains' latest version in TXFENCE_SECRETS."
  }
}
