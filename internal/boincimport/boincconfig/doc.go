// Package boincconfig turns an existing BOINC project's configuration into
// this server's project file, for `taskctl import boinc`.
//
// It reads the old project directory's config.xml (BOINC's
// <boinc><config>…</config><daemons>…</daemons><tasks>…</tasks></boinc>),
// its config_aux.xml (per-app in-progress limits) and its
// plan_class_spec.xml, and writes the YAML project file every program here
// reads (keys are flag names; the daemons: list is the supervisor's). Every
// option and daemon is accounted for in a Report: carried over (and to
// which keys), or left out with the reason: no equivalent here, our
// behaviour differs, or the operator has to act (route a URL, port a
// project's own program, move files).
//
// What stays where it is: the old download and upload directories and key
// files are named by absolute path, not copied, since tasks in flight name
// those files and clients hold signatures made with those keys. The plan
// classes are copied into the new project directory once they parse.
//
// Convert reads and writes files; Translate is the pure conversion the
// tests drive option by option.
package boincconfig
