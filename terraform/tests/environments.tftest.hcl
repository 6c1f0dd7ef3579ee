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
