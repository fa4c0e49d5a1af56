// Command child is the daemon stand-in of the supervisor's tests: it takes
// the flags a daemon gets, serves /healthz on --listen (503 with the
// contents of --healthz-file while that file exists), records each start in
// --starts (once its signal handling is set), and exits, ignores SIGTERM or fails as told.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	flag.String("config", "", "configuration file (unused)")
	flag.Int("mod", 1, "replicas (unused)")
	flag.Int("mod-index", 0, "replica index (unused)")
	listen := flag.String("listen", "", "address of /healthz")
	exitAfter := flag.Duration("exit-after", 0, "exit with --exit-code after this long (0: never)")
	exitCode := flag.Int("exit-code", 1, "exit code for --exit-after")
	ignoreTerm := flag.Bool("ignore-term", false, "ignore SIGTERM")
	starts := flag.String("starts", "", "file to append \"<pid> <unix nanoseconds>\" to at start")
	sick := flag.String("healthz-file", "", "while this file exists, /healthz answers 503 with its contents")
	flag.Parse()

	sigs := make(chan os.Signal, 1)
	if *ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
	} else {
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	}
	// A start is recorded only once the signal handling is in place, so a
	// test that waits for it knows SIGTERM now does what it was told.
	if *starts != "" {
		f, err := os.OpenFile(*starts, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		fmt.Fprintf(f, "%d %d\n", os.Getpid(), time.Now().UnixNano())
		f.Close()
	}
	if *listen != "" {
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			if why, err := os.ReadFile(*sick); *sick != "" && err == nil {
				http.Error(w, string(why), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		go func() { _ = http.Serve(ln, mux) }()
	}
	fmt.Println("child running", os.Getpid())
	var timeout <-chan time.Time
	if *exitAfter > 0 {
		timeout = time.After(*exitAfter)
	}
	select {
	case <-sigs:
		fmt.Println("child stopping")
		os.Exit(0)
	case <-timeout:
		os.Exit(*exitCode)
	}
}
