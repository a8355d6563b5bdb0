// Command keygate-redmine runs a real Redmine on this machine for a tour
// of keygate with an issue tracker (`make redmine`): Debian's packaged
// Redmine (scripts/test-deps.sh installs it) on a free loopback port,
// seeded with a project, an issue with a public and a private note, and
// a wiki page to make contracts from, and keygate's account on it with
// the least permissions that work. It writes the host block that
// connects the gateway into webapi.d/, whose fragments the default
// Caddyfile imports, and removes it, with the whole Redmine, when stopped
// (Ctrl-C).
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/keygate/keygate/internal/testkit/redminetest"
)

func main() {
	dir := flag.String("dir", "webapi.d", "where to write the host block (redmine.caddyfile) and the API key's file: the directory the Caddyfile imports")
	flag.Parse()
	log.SetFlags(0)
	r := &runner{}
	defer r.stop()
	go func() {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
		<-stop
		r.stop()
		os.Exit(0)
	}()
	if err := r.run(*dir); err != nil {
		r.Fatalf("%v", err)
	}
	select {}
}

// runner runs the Redmine and undoes what it did when stopped; it is the
// kit's TB for a program: a fatal error stops everything and exits.
type runner struct {
	cleanups []func()
}

func (r *runner) Helper()                      {}
func (r *runner) Logf(format string, a ...any) { log.Printf(format, a...) }
func (r *runner) Cleanup(f func())             { r.cleanups = append(r.cleanups, f) }
func (r *runner) Fatalf(format string, a ...any) {
	log.Printf("keygate-redmine: "+format, a...)
	r.stop()
	os.Exit(1)
}

func (r *runner) stop() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	r.cleanups = nil
}

func (r *runner) run(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	block := filepath.Join(dir, "redmine.caddyfile")
	if _, err := os.Stat(block); err == nil {
		return fmt.Errorf("%s exists: another keygate-redmine runs (or was killed); stop it, or remove the file", block)
	}
	rm := redminetest.Start(r)
	rm.CreateProject(r, "acme", "ACME")
	bot := rm.CreateUser(r, "keygate", "acme")
	issue := rm.CreateIssue(r, "acme", "Printer jams on page 2",
		"The office printer **jams** on the second page of every duplex job.\n\n- model: LaserJet 4\n- since: Monday", nil)
	rm.AddNote(r, issue, "We ordered a new roller; it arrives on Thursday.", false)
	rm.AddNote(r, issue, "Internal: the customer is on the premium plan.", true)
	rm.CreateWikiPage(r, "acme", "NDA", "# Mutual non-disclosure agreement\n\n"+
		"The parties keep **confidential** what they learn of each other's business:\n\n"+
		"1. for *five years* after this agreement ends;\n2. in every country.\n\nBoth sign below.")

	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	keyFile := filepath.Join(dir, "redmine.key")
	if err := os.WriteFile(keyFile, []byte(bot.APIKey+"\n"), 0o600); err != nil {
		return err
	}
	r.Cleanup(func() { os.Remove(keyFile) })
	conf := fmt.Sprintf("# Written by keygate-redmine (make redmine), removed when it stops.\nhost redmine {\n\turl %s\n\tapi_key_file %s\n\tcache 0s\n}\n", rm.URL, keyFile)
	if err := os.WriteFile(block, []byte(conf), 0o600); err != nil {
		return err
	}
	r.Cleanup(func() { os.Remove(block) })

	id := strconv.Itoa(issue)
	fmt.Printf(`
Redmine %s runs at %s (sign in as %s / %s to watch comments arrive).
  project acme: issue %s "Printer jams on page 2" (a public and a private note), wiki page NDA
  keygate's account: %s, with only %v
Written: %s (the default Caddyfile imports it)

Start the gateway now (make run), or restart it if it runs, then:
  curl -s localhost:2019/webapi/host        # who keygate is on Redmine
  ISSUE_ID=%s                               # the issue the README's tour shares

Ctrl-C stops Redmine and removes the host block: the gateway's next start has no tracker.
`, rm.Version, rm.URL, redminetest.AdminLogin, redminetest.AdminPassword, id, bot.Login, redminetest.ConnectorPermissions, block, id)
	return nil
}
