// boinc_demo: a small science application written against BOINC's own
// application library (Debian's libboinc-app-dev), run by the real BOINC
// client in the task server's real-client test (make test-client).
//
// It does what real BOINC applications do, each once and visibly:
//   - boinc_init, and boinc_finish at the end (never a plain exit);
//   - opens its files by logical name (boinc_resolve_filename_s): inputs
//     "in" (the job's own), "shared" (one sticky file shared by every job)
//     and "params" (stored gzip'd on the server; the client gunzips it);
//     outputs "out" and "log";
//   - reads its command line: --rounds N (the work), --trickle-wait S
//     (how long to wait for a trickle-down message at the end);
//   - reports boinc_fraction_done, and checkpoints when the client says it
//     is time, resuming from the checkpoint after a restart;
//   - sends trickle-up messages and writes the trickle-down it receives
//     into "log".
//
// "out" depends only on the inputs and --rounds, so two hosts' results
// compare equal bit for bit; "log" (about 300 KB, so its upload is big
// enough to be resumed) also holds what happened on this host and is not
// validated. The Go twin of "out" is internal/boincapp.Output. An input
// starting with "FAIL" makes the app fail with exit status 3 on every host.
#include <boinc/boinc_api.h>
#include <boinc/filesys.h>
#include <boinc/util.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

// The checkpoint lives in the slot directory, under a plain (unresolved)
// name: the client keeps the slot when it restarts a task, and the file is
// neither an input nor an output.
static const char* kCheckpoint = "checkpoint";
static const size_t kLogSize = 300 * 1024;

// fnv feeds n bytes into the 64-bit FNV-1a hash h.
static uint64_t fnv(uint64_t h, const void* p, size_t n) {
    const unsigned char* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;
    }
    return h;
}
static const uint64_t kFnvOffset = 14695981039346656037ULL;

// round is one unit of work: the state and the round number, little-endian,
// hashed afresh.
static uint64_t round_of(uint64_t h, uint64_t r) {
    unsigned char b[16];
    for (int i = 0; i < 8; i++) {
        b[i] = (unsigned char)(h >> (8 * i));
        b[8 + i] = (unsigned char)(r >> (8 * i));
    }
    return fnv(kFnvOffset, b, sizeof b);
}

// read_input reads the whole input file with logical name into out.
static bool read_input(const char* logical, std::string& out) {
    std::string path;
    if (boinc_resolve_filename_s(logical, path)) return false;
    FILE* f = boinc_fopen(path.c_str(), "rb");
    if (!f) return false;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    bool ok = !ferror(f);
    fclose(f);
    return ok;
}

// open_output opens the output file with logical name for writing.
static FILE* open_output(const char* logical) {
    std::string path;
    if (boinc_resolve_filename_s(logical, path)) return NULL;
    return boinc_fopen(path.c_str(), "wb");
}

// State is what a checkpoint holds: the rounds done, the hash state after
// them, and the trickle-ups sent so far (so that after a restart the
// count, and the numbering of the messages, go on).
struct State {
    long round;
    uint64_t h;
    int sent;
};

// save writes the checkpoint: to a new file, renamed, so a crash mid-write
// leaves the old checkpoint whole.
static void save(const State& st) {
    FILE* f = boinc_fopen("checkpoint.new", "w");
    if (!f) return;
    fprintf(f, "round %ld state %016" PRIx64 " sent %d\n", st.round, st.h, st.sent);
    fclose(f);
    boinc_rename("checkpoint.new", kCheckpoint);
}

// checkpoint saves the state when the client says it is time (its
// checkpoint period, the volunteer's "store at most every" preference).
static void checkpoint(const State& st) {
    if (!boinc_time_to_checkpoint()) return;
    save(st);
    boinc_checkpoint_completed();
}

static void fail(const char* what) {
    fprintf(stderr, "boinc_demo: %s\n", what);
    boinc_finish(1);
}

// trickle_up sends one trickle-up message. The count is saved first and
// the message sent in a critical section (the client cannot stop the app
// in between), so a message is counted exactly when it is sent, whatever
// restarts. The client names the message's file by the second it arrived
// in, so two messages must be a second apart (boinc_sleep, not sleep: the
// library's timer signal, ten times a second, cuts a plain sleep short).
static void trickle_up(State& st, const char* text) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s (message %d)", text, st.sent + 1);
    boinc_begin_critical_section();
    st.sent++;
    save(st);
    if (boinc_send_trickle_up(const_cast<char*>("boinc_demo"), buf)) {
        fprintf(stderr, "boinc_demo: trickle-up %d not sent\n", st.sent);
    }
    boinc_end_critical_section();
    boinc_sleep(1);
}

// trickle_down returns the text of a trickle-down message the client put
// in the slot directory, on one line, or "" when none has come; the file is
// removed so that the same message is not read twice.
static std::string trickle_down() {
    char name[256];
    if (!boinc_receive_trickle_down(name, sizeof name)) return "";
    std::string text;
    FILE* f = boinc_fopen(name, "rb");
    if (f) {
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
        fclose(f);
    }
    boinc_delete_file(name);
    // The client keeps the message's line breaks, the first and last too.
    for (char& c : text) {
        if (c == '\n' || c == '\r') c = ' ';
    }
    size_t b = text.find_first_not_of(' '), e = text.find_last_not_of(' ');
    return b == std::string::npos ? std::string("(empty trickle-down)") : text.substr(b, e - b + 1);
}

int main(int argc, char** argv) {
    long rounds = 1000;
    int trickle_wait = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
            rounds = atol(argv[++i]);
        } else if (!strcmp(argv[i], "--trickle-wait") && i + 1 < argc) {
            trickle_wait = atoi(argv[++i]);
        }
        // Other arguments (the client adds none today) are ignored, as
        // BOINC applications do.
    }
    if (boinc_init()) return 1;
    if (rounds < 1) fail("--rounds must be at least 1");

    std::string in, shared, params;
    if (!read_input("in", in)) fail("cannot read input \"in\"");
    if (!read_input("shared", shared)) fail("cannot read input \"shared\"");
    if (!read_input("params", params)) fail("cannot read input \"params\"");
    if (in.compare(0, 4, "FAIL") == 0) {
        fprintf(stderr, "boinc_demo: the input asks for a failure\n");
        boinc_finish(3);
    }
    // The first call also tells the library to listen for trickle-downs.
    std::string down = trickle_down();

    // The state starts from every input; a checkpoint restores it.
    State st = {0, kFnvOffset, 0};
    st.h = fnv(st.h, in.data(), in.size());
    st.h = fnv(st.h, shared.data(), shared.size());
    st.h = fnv(st.h, params.data(), params.size());
    FILE* cp = boinc_fopen(kCheckpoint, "r");
    if (cp) {
        State c = {0, 0, 0};
        if (fscanf(cp, "round %ld state %" SCNx64 " sent %d", &c.round, &c.h, &c.sent) == 3 &&
            c.round >= 0 && c.round <= rounds && c.sent >= 0) {
            st = c;
        }
        fclose(cp);
    }
    const long start = st.round;
    // stderr.txt goes back to the project with the result (stderr_out).
    if (start) fprintf(stderr, "boinc_demo: resumed from the checkpoint at round %ld\n", start);

    trickle_up(st, start ? "resumed" : "started");
    while (st.round < rounds) {
        st.h = round_of(st.h, (uint64_t)st.round);
        st.round++;
        checkpoint(st);
        if ((st.round & 0xffff) == 0) boinc_fraction_done((double)st.round / rounds);
    }
    const uint64_t h = st.h;

    // A trickle-down answers a trickle-up in a later scheduler request:
    // each further trickle-up makes the client send one, so wait, asking
    // again every few seconds, for at most --trickle-wait seconds.
    if (!boinc_is_standalone()) {
        for (int waited = 0; down.empty() && waited < trickle_wait; waited++) {
            if (waited % 8 == 7) trickle_up(st, "waiting for a trickle-down");
            boinc_sleep(1);
            checkpoint(st);
            down = trickle_down();
        }
    }

    FILE* out = open_output("out");
    if (!out) fail("cannot create output \"out\"");
    fprintf(out, "in %zu bytes\nshared %zu bytes\nparams %zu bytes\nrounds %ld\ndigest %016" PRIx64 "\n",
            in.size(), shared.size(), params.size(), rounds, h);
    if (fclose(out)) fail("cannot write output \"out\"");

    FILE* log = open_output("log");
    if (!log) fail("cannot create output \"log\"");
    fprintf(log, "started at round %ld of %ld\n", start, rounds);
    fprintf(log, "trickle-ups sent: %d\n", st.sent);
    fprintf(log, "trickle-down: %s\n", down.empty() ? "(none)" : down.c_str());
    // Filler, so that the upload is large enough to be interrupted and
    // resumed.
    uint64_t x = h;
    for (long i = 0; ftell(log) < (long)kLogSize; i++) {
        x = round_of(x, (uint64_t)i);
        fprintf(log, "filler %08ld %016" PRIx64 "\n", i, x);
    }
    if (fclose(log)) fail("cannot write output \"log\"");

    boinc_fraction_done(1);
    boinc_finish(0);
}
