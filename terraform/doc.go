// Package terraform holds no code: its tests check the terraform
// configuration beside it (validation through tools/tf-validate.sh, the
// environments' sizing, the alerts' runbook links) and the Cloud Build
// pipeline that deploys it (../cloudbuild.yaml).
package terraform
