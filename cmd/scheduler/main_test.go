package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/httpserve"
	"github.com/taskserver/taskserver/internal/keys"
	"github.com/taskserver/taskserver/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitListening waits until the scheduler run reports in addrFile the
// addresses its public (--addr) and admin (--listen) listeners bound, or
// fails the test when run returns first.
func waitListening(t *testing.T, addrFile string, done <-chan error) (addr, admin string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		addrs, _ := httpserve.ReadAddrFile(addrFile)
		if addrs[flagAddr] != "" && addrs[config.FlagListen] != "" {
			return addrs[flagAddr], addrs[config.FlagListen]
		}
		select {
		case err := <-done:
			t.Fatalf("run exited before listening: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no address of --%s and --%s in %s within 20s", flagAddr, config.FlagListen, addrFile)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRunServesEverythingOnOneAddress starts the command as main would and
// checks each endpoint is wired, the public ones on --addr and /metrics and
// /healthz on --listen; it runs before any feeder exists.
func TestRunServesEverythingOnOneAddress(t *testing.T) {
	t.Parallel()
	dsn := storetest.NewDatabase(t)
	dir := t.TempDir()
	k, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "keys"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := keys.WritePrivateFile(filepath.Join(dir, "keys", "upload_private"), k); err != nil {
		t.Fatal(err)
	}
	addrFile := filepath.Join(dir, "addrs")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		// Port 0 and no URL base: the master page must name the port the
		// kernel gave.
		done <- run(ctx, []string{"scheduler", "--db-dsn", dsn, "--project-dir", dir, "--addr", "127.0.0.1:0", "--listen", "127.0.0.1:0",
			"--addr-file", addrFile, "--url-base", "",
			"--shm-path", filepath.Join(dir, "no-feeder-yet"), "--project-name", "Smoke", "--log-level", "error"})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run after cancel = %v, want nil", err)
		}
	}()
	addr, admin := waitListening(t, addrFile, done)
	base := "http://" + addr

	if code, body := get(t, base+"/"); code != 200 || !strings.Contains(body, "\n<link rel=\"boinc_scheduler\" href=\""+base+"/scheduler\">\n") {
		t.Fatalf("GET / = %d:\n%s", code, body)
	}
	if code, body := get(t, "http://"+admin+"/healthz"); code != 200 {
		t.Fatalf("GET /healthz = %d %q", code, body)
	}
	resp, err := http.Post(base+"/scheduler", "application/x-www-form-urlencoded",
		strings.NewReader("<scheduler_request><authenticator>nobody</authenticator><hostid>0</hostid></scheduler_request>"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "Invalid or missing account key") || !strings.Contains(string(b), "<project_name>Smoke</project_name>") {
		t.Fatalf("POST /scheduler with an unknown key = %d:\n%s", resp.StatusCode, b)
	}
	if code, body := get(t, "http://"+admin+"/metrics"); code != 200 || !strings.Contains(body, `taskserver_scheduler_requests_total{outcome="bad_authenticator"} 1`) {
		t.Fatalf("GET /metrics = %d, lacks the request count:\n%s", code, body)
	}
	if code, body := get(t, "http://"+admin+"/metrics"); code != 200 || !strings.Contains(body, `taskserver_scheduler_ar_sends_total{replicated="true"} 0`) {
		t.Fatalf("GET /metrics = %d, lacks the adaptive replication sends:\n%s", code, body)
	}
	if code, body := get(t, base+"/get_project_config.php"); code != 200 || !strings.Contains(body, "<name>Smoke</name>") ||
		!strings.Contains(body, "<account_creation_disabled>1</account_creation_disabled>") {
		t.Fatalf("GET /get_project_config.php = %d, want the project named and account creation off (the default):\n%s", code, body)
	}
	// Answered as a wrong password: nobody learns which addresses have accounts.
	if code, body := get(t, base+"/lookup_account.php?email_addr=nobody%40example%2Ecom"); code != 200 || !strings.Contains(body, "<error_num>-206</error_num>") {
		t.Fatalf("GET /lookup_account.php of an unknown address = %d, want error -206:\n%s", code, body)
	}
	if code, _ := get(t, base+"/download/0/nothing"); code != http.StatusNotFound {
		t.Fatalf("GET of a missing download = %d, want 404", code)
	}
}

// TestRunRefusesBadPolicyFlags is not parallel: it runs a cli app (the
// urfave/cli help flag race).
func TestRunRefusesBadPolicyFlags(t *testing.T) {
	dir := t.TempDir()
	err := run(context.Background(), []string{"scheduler", "--db-dsn", "root@tcp(127.0.0.1:1)/none", "--project-dir", dir,
		"--ar-trust-valid", "0", "--ar-spot-check", "1.5", "--quarantine-streak", "-1"})
	if err == nil {
		t.Fatal("run with bad policy flags = nil, want an error")
	}
	for _, f := range []string{"--ar-trust-valid 0", "--ar-spot-check 1.5", "--quarantine-streak -1"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("run with bad policy flags = %q, want it to name %s", err, f)
		}
	}
}
