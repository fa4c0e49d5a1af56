// Package projectprefs reads and writes a volunteer's project preferences,
// BOINC's <project_preferences> document (user.project_prefs), and decides
// what they allow: which apps may be sent (the apps a volunteer selected,
// and the others only when those have no work and the volunteer accepts
// them), beta apps and versions (only to volunteers who opted in), and
// which of the host's resources may be used.
//
// The element names are BOINC's, as its web pages write them and its
// scheduler reads them (sched/sched_types.cpp, PROJECT_PREFS::parse):
//
//	<app_id>N</app_id>                          an app the volunteer runs (repeated)
//	<allow_non_preferred_apps>1</…>             other apps when the selected ones have no work
//	<allow_beta_work>1</allow_beta_work>        beta apps and versions
//	<no_cpu>, <no_cuda>, <no_ati>,
//	<no_intel_gpu>, <no_apple_gpu>, <no_gpus>   resources not to use
//	<no_rsc>TYPE</no_rsc>                       any resource by its type name (the client's form)
//	<max_jobs>N</max_jobs>                      at most N tasks in progress on a host
//	<max_cpus>N</max_cpus>                      count at most N CPUs of a host
//
// As BOINC's scheduler does, these are found wherever they are in the
// document (BOINC's web form puts <app_id> in <apps_selected>, and that,
// <allow_non_preferred_apps>, <max_jobs> and <max_cpus> inside
// <project_specific>), and a <venue name="…"> section replaces the
// rest for hosts in that venue. Everything else (resource share,
// project-specific settings) is kept as written and ignored here.
//
// The package is pure: no SQL, no clock.
package projectprefs
