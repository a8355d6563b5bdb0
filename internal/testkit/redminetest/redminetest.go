// Package redminetest gives tests a real Redmine: Debian's packaged
// Redmine (scripts/test-deps.sh installs `redmine`, `redmine-sqlite` and
// `ruby-webrick`) served by WEBrick on a free loopback port from a
// temporary directory, stopped and removed again. Its SQLite database is a
// copy of a pristine one prepared once per machine and Redmine version
// (migrated, default data loaded in English, the REST API enabled) and
// kept in the user's cache directory; each server's administrator gets an
// API key of its own.
//
// The server runs as the current user and changes nothing outside its
// temporary directory and the cache: configuration, logs, attachments and
// caches all live in a private Redmine "instance" (see instanceEnv), and
// Bundler reads a private Gemfile that adds WEBrick, which Ruby 3 no
// longer bundles.
//
// The helpers seed data as a client would, through the REST API; what
// that API cannot create (roles, custom fields, saved queries) they create
// through Redmine's own administration forms, signed in as the
// administrator.
package redminetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/freeport"
)

// Root is where Debian installs Redmine.
const Root = "/usr/share/redmine"

// The administrator of every server; its password is Redmine's default,
// harmless on a loopback server that lives for one test binary.
const (
	AdminLogin    = "admin"
	AdminPassword = "admin"
)

// StartTimeout bounds a server's start; its log's tail explains a failure.
const StartTimeout = 90 * time.Second

// prepareTimeout bounds each Ruby step of the one-time preparation.
const prepareTimeout = 5 * time.Minute

// recipe changes when the preparation below does, so that a pristine
// database made by an older recipe is not used.
const recipe = "3"

// ConnectorPermissions is the least privilege a connector reading and
// updating issues needs. view_private_notes and set_notes_private are
// left out on purpose: private notes must stay out of its sight.
var ConnectorPermissions = []string{"view_issues", "add_issue_notes", "edit_issues", "view_wiki_pages"}

// TB is what the helpers need of a test, as testing.TB has it; a program
// that runs a Redmine of its own (cmd/keygate-redmine) gives its own.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
}

// Server is one running Redmine.
type Server struct {
	// URL is its base, http://127.0.0.1:port, without a trailing slash.
	URL string
	// AdminKey is the administrator's REST API key, this server's alone.
	AdminKey string
	// Version is Redmine's, as in "5.0.4".
	Version string

	dir     string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	client  *http.Client

	mu    sync.Mutex
	web   *http.Client // the administrator's signed-in browser session
	csrf  string       // that session's authenticity token
	roles map[string]int
}

// User is a user created by CreateUser.
type User struct {
	ID       int
	Login    string
	Password string
	APIKey   string
}

// Start starts a server of tb's own, stopped when tb ends.
func Start(tb TB) *Server {
	tb.Helper()
	s, err := start(tb)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Shared is the test binary's server, started on first use and stopped by
// Main. Tests that share it must not depend on what others seed: each
// should use projects and logins of its own.
func Shared(tb TB) *Server {
	tb.Helper()
	shared.once.Do(func() { shared.srv, shared.err = start(tb) })
	if shared.err != nil {
		tb.Fatalf("%v", shared.err)
	}
	return shared.srv
}

// Main runs a package's tests and then stops the shared server, if one
// was started: call it from TestMain as os.Exit(redminetest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if shared.srv != nil {
		shared.srv.Stop()
	}
	return code
}

// Stop ends the server's processes and removes its directory.
func (s *Server) Stop() {
	if s == nil || s.cmd == nil {
		return
	}
	s.kill()
	_ = os.RemoveAll(s.dir)
}

func (s *Server) kill() {
	pid := s.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-s.done
	}
}

func start(tb TB) (*Server, error) {
	tb.Helper()
	began := time.Now()
	progs, err := findPrograms()
	if err != nil {
		return nil, err
	}
	p, took, err := pristine(progs)
	if err != nil {
		return nil, err
	}
	if took > 0 {
		tb.Logf("redminetest: prepared the pristine database of Redmine %s in %s", p.version, took.Round(time.Millisecond))
	}
	dir, err := os.MkdirTemp("", "keygate-redmine-")
	if err != nil {
		return nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	inst := filepath.Join(dir, "instance")
	db := filepath.Join(inst, "db.sqlite3")
	if err := layout(dir, inst, db); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := copyFile(filepath.Join(p.dir, "redmine.sqlite3"), db); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// A key of each server's own: a server that took the port meant for
	// this one (another test binary's) answers 401 to it, not 200.
	adminKey := randomHex(20)
	if err := run(nil, progs.sqlite3, "-bail", db, fmt.Sprintf(`
INSERT INTO tokens (user_id, action, value, created_on, updated_on)
  SELECT id, 'api', '%s', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP FROM users WHERE login = '%s';`,
		adminKey, AdminLogin)); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// A port found free may be taken before WEBrick binds it: try a few.
	var lastErr error
	for range 5 {
		s, err := launch(progs, dir, inst, p.version, adminKey)
		if err == nil {
			tb.Logf("redminetest: Redmine %s at %s, started in %s", s.Version, s.URL, time.Since(began).Round(time.Millisecond))
			return s, nil
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

var errPortTaken = errors.New("port taken")

func launch(progs programs, dir, inst, version, adminKey string) (*Server, error) {
	port, err := freeport.One()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "server.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o666)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	// rackup rather than `rails server`: the latter creates tmp/ under
	// Rails.root (/usr/share/redmine), which is not ours to write.
	cmd := exec.Command(progs.rackup, "-s", "webrick", "-o", "127.0.0.1", "-p", strconv.Itoa(port),
		"-E", "production", filepath.Join(Root, "config.ru"))
	cmd.Dir = Root
	cmd.Env = rubyEnv(dir, inst, "RAILS_LOG_TO_STDOUT=1")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The server goes when the test process does, however it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("redminetest: starting %s: %w", progs.rackup, err)
	}
	s := &Server{
		URL:      fmt.Sprintf("http://127.0.0.1:%d", port),
		AdminKey: adminKey,
		Version:  version,
		dir:      dir,
		logPath:  logPath,
		cmd:      cmd,
		done:     make(chan struct{}),
		client:   &http.Client{Timeout: 60 * time.Second},
		roles:    map[string]int{},
	}
	go func() { _ = cmd.Wait(); close(s.done) }()
	if err := s.waitReady(StartTimeout); err != nil {
		s.kill()
		log, _ := os.ReadFile(logPath)
		if bytes.Contains(log, []byte("Address already in use")) {
			return nil, errPortTaken
		}
		return nil, fmt.Errorf("redminetest: Redmine did not start: %v\nlast lines of its log:\n%s", err, tail(dropFrames(log), 3000))
	}
	return s, nil
}

// waitReady polls the REST API, as the administrator, until it answers.
func (s *Server) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	client := &http.Client{Timeout: 5 * time.Second}
	var last error
	for {
		select {
		case <-s.done:
			return errors.New("the server exited")
		default:
		}
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/issues.json", nil)
		req.Header.Set("X-Redmine-API-Key", s.AdminKey)
		resp, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("GET /issues.json: %s", resp.Status)
		}
		last = err
		if time.Now().After(deadline) {
			return fmt.Errorf("not answering within %s: %v", limit, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// programs are those the kit runs.
type programs struct{ ruby, rackup, sqlite3 string }

func findPrograms() (programs, error) {
	var t programs
	missing := func(what string) error {
		return fmt.Errorf("redminetest: %s not found: Redmine cannot run here; run scripts/test-deps.sh (Debian packages redmine, redmine-sqlite, ruby-webrick)", what)
	}
	if _, err := os.Stat(filepath.Join(Root, "config.ru")); err != nil {
		return t, missing("Redmine (" + Root + ")")
	}
	for _, f := range []struct {
		name string
		to   *string
	}{{"ruby", &t.ruby}, {"rackup", &t.rackup}, {"sqlite3", &t.sqlite3}} {
		p, err := exec.LookPath(f.name)
		if err != nil {
			return t, missing("`" + f.name + "`")
		}
		*f.to = p
	}
	return t, nil
}

// layout makes a private Redmine instance in inst: its configuration,
// log, temporary files, attachments; and dir/Gemfile.
func layout(dir, inst, db string) error {
	for _, d := range []string{"config", "log", "tmp", "files", "public/plugin_assets"} {
		if err := os.MkdirAll(filepath.Join(inst, d), 0o755); err != nil {
			return err
		}
	}
	// The sqlite3 gem is declared by Debian's Gemfile only when it can
	// read /etc/redmine's database.yml (as root), and webrick only by a
	// Gemfile.local, so each is added here unless already there.
	gemfile := "eval_gemfile " + strconv.Quote(filepath.Join(Root, "Gemfile")) + "\n" +
		"%w[sqlite3 webrick].each { |g| gem g unless @dependencies.any? { |d| d.name == g } }\n"
	database := "production:\n  adapter: sqlite3\n  database: " + strconv.Quote(db) + "\n  timeout: 10000\n"
	files := map[string]string{
		filepath.Join(dir, "Gemfile"):                   gemfile,
		filepath.Join(inst, "config", "database.yml"):   database,
		filepath.Join(inst, "config", "secret_key.txt"): randomHex(32) + "\n",
	}
	for name, text := range files {
		if err := os.WriteFile(name, []byte(text), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// rubyEnv is the environment of Redmine's Ruby processes: this process's,
// less what would point Rails, Bundler or Redmine elsewhere, plus extra.
func rubyEnv(dir, inst string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "BUNDLE_"), strings.HasPrefix(name, "RAILS_"), strings.HasPrefix(name, "RACK_"),
			name == "DATABASE_URL", name == "REDMINE_INSTANCE", name == "X_DEBIAN_SITEID", name == "SECRET_KEY_BASE",
			name == "RUBYOPT", name == "RUBYLIB", name == "GEM_HOME", name == "GEM_PATH", name == "SCHEMA",
			name == "REDMINE_LANG", name == "LANG", name == "LC_ALL":
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"RAILS_ENV=production",
		"BUNDLE_GEMFILE="+filepath.Join(dir, "Gemfile"),
		"REDMINE_INSTANCE="+instanceEnv(inst),
		// Ruby reads its files (YAML locales, templates) in the locale's
		// encoding: without a UTF-8 locale, non-ASCII text breaks.
		"LANG=C.UTF-8", "LC_ALL=C.UTF-8",
	)
	return append(env, extra...)
}

// instanceEnv is the REDMINE_INSTANCE that makes inst Redmine's instance
// directory. Debian's Redmine puts an instance's config, log, tmp and files
// under Rails.root/instances/$REDMINE_INSTANCE (Rails.root is Root,
// instances a link to /var/lib/redmine), and offers no other way to move
// them. Enough "../" climb to "/" whether Ruby resolves them as text or
// the kernel through the link, and both then reach inst.
func instanceEnv(inst string) string {
	return strings.Repeat("../", 16) + strings.TrimPrefix(filepath.Clean(inst), "/")
}

// pristineDB is a machine's pristine database.
type pristineDB struct {
	dir, version string
}

// pristine returns the pristine database of this machine's Redmine,
// preparing it first if no test binary did yet; took is how long that
// took, 0 if it was there.
func pristine(progs programs) (p pristineDB, took time.Duration, err error) {
	version, key, err := versionKey()
	if err != nil {
		return p, 0, err
	}
	base, err := os.UserCacheDir()
	if err != nil || os.MkdirAll(base, 0o755) != nil {
		base = os.TempDir()
	}
	base = filepath.Join(base, "keygate-redminetest")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return p, 0, err
	}
	p = pristineDB{dir: filepath.Join(base, "redmine-"+version+"-"+key), version: version}
	// Test binaries of several packages start at once: one prepares, the
	// others wait for it.
	lock, err := os.OpenFile(p.dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return p, 0, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return p, 0, err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(filepath.Join(p.dir, "redmine.sqlite3")); err == nil {
		return p, 0, nil
	}
	began := time.Now()
	if err := prepare(progs, base, p.dir); err != nil {
		return p, 0, err
	}
	return p, time.Since(began), nil
}

// versionKey names the installed Redmine: its version, and a hash of what
// decides its schema and of the kit's recipe, so that an upgrade (even one
// that keeps the version) prepares a new database.
func versionKey() (version, key string, err error) {
	src, err := os.ReadFile(filepath.Join(Root, "lib", "redmine", "version.rb"))
	if err != nil {
		return "", "", fmt.Errorf("redminetest: Redmine not found (%v): run scripts/test-deps.sh", err)
	}
	var parts []string
	for _, name := range []string{"MAJOR", "MINOR", "TINY"} {
		m := regexp.MustCompile(name + `\s*=\s*(\d+)`).FindSubmatch(src)
		if m == nil {
			return "", "", fmt.Errorf("redminetest: no %s in %s/lib/redmine/version.rb", name, Root)
		}
		parts = append(parts, string(m[1]))
	}
	migrations, err := os.ReadDir(filepath.Join(Root, "db", "migrate"))
	if err != nil {
		return "", "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "recipe %s\n%s\n", recipe, src)
	for _, m := range migrations {
		fmt.Fprintln(h, m.Name())
	}
	return strings.Join(parts, "."), hex.EncodeToString(h.Sum(nil))[:12], nil
}

// prepare makes the pristine database in final: migrated, Redmine's
// default data (roles, trackers, statuses, priorities) loaded, the REST
// API enabled, and the administrator free to sign in with the default
// password without changing it first. Each server adds the
// administrator's API key.
func prepare(progs programs, base, final string) error {
	work, err := os.MkdirTemp(base, "prepare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	inst := filepath.Join(work, "instance")
	out := filepath.Join(work, "out")
	db := filepath.Join(out, "redmine.sqlite3")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := layout(work, inst, db); err != nil {
		return err
	}
	// SCHEMA: else db:migrate writes db/schema.rb under Root.
	env := rubyEnv(work, inst, "SCHEMA="+filepath.Join(work, "schema.rb"), "REDMINE_LANG=en")
	for _, task := range []string{"db:migrate", "redmine:load_default_data"} {
		if err := run(env, progs.ruby, filepath.Join(Root, "bin", "rake"), task); err != nil {
			return err
		}
	}
	sql := fmt.Sprintf(`
DELETE FROM settings WHERE name = 'rest_api_enabled';
INSERT INTO settings (name, value, updated_on) VALUES ('rest_api_enabled', '1', CURRENT_TIMESTAMP);
UPDATE users SET must_change_passwd = 0 WHERE login = '%s';`, AdminLogin)
	if err := run(nil, progs.sqlite3, "-bail", db, sql); err != nil {
		return err
	}
	return os.Rename(out, final)
}

// run runs a step of preparing a database in Root, bounded by
// prepareTimeout.
func run(env []string, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), prepareTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = Root
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("redminetest: preparing a database: %s %s: %v\n%s",
			filepath.Base(name), strings.Join(args[len(args)-1:], " "), err, tail(dropFrames(out), 3000))
	}
	return nil
}

// Log returns the server's log so far (WEBrick's and Rails's).
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}

// Do sends a REST API request as key's holder (none if key is empty):
// in, unless nil, as its JSON body. It returns the status and the body.
func (s *Server) Do(key, method, path string, in any) (int, []byte, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.URL+path, body)
	if err != nil {
		return 0, nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("X-Redmine-API-Key", key)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// JSON sends a REST API request as Do does, fails tb unless the answer's
// status is want, and decodes its body into out unless out is nil.
func (s *Server) JSON(tb TB, key, method, path string, in any, want int, out any) {
	tb.Helper()
	status, body, err := s.Do(key, method, path, in)
	if err != nil {
		tb.Fatalf("redminetest: %s %s: %v", method, path, err)
	}
	if status != want {
		tb.Fatalf("redminetest: %s %s: status %d, want %d: %s", method, path, status, want, tail(body, 1000))
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			tb.Fatalf("redminetest: %s %s: decoding %q: %v", method, path, tail(body, 300), err)
		}
	}
}

// CreateProject creates a private project (so that only its members see
// it: Redmine's "Non member" role may view issues of public ones) with
// the default modules and trackers, and returns its id.
func (s *Server) CreateProject(tb TB, identifier, name string) int {
	tb.Helper()
	var out struct{ Project struct{ ID int } }
	s.JSON(tb, s.AdminKey, http.MethodPost, "/projects.json", map[string]any{"project": map[string]any{
		"identifier": identifier, "name": name, "is_public": false,
	}}, http.StatusCreated, &out)
	return out.Project.ID
}

// CreateUser creates an active, non-admin user and returns it with its
// API key. Unless project is empty, the user becomes its member with a
// role holding exactly permissions (ConnectorPermissions if none).
func (s *Server) CreateUser(tb TB, login, project string, permissions ...string) User {
	tb.Helper()
	u := User{Login: login, Password: randomHex(12)}
	var out struct{ User struct{ ID int } }
	s.JSON(tb, s.AdminKey, http.MethodPost, "/users.json", map[string]any{"user": map[string]any{
		"login": login, "firstname": login, "lastname": "Test", "mail": login + "@example.com",
		"password": u.Password,
	}}, http.StatusCreated, &out)
	u.ID = out.User.ID
	if project != "" {
		s.AddMember(tb, project, u.ID, permissions...)
	}
	// Redmine makes a user's API key when it is first asked for.
	var shown struct {
		User struct {
			APIKey string `json:"api_key"`
		}
	}
	s.JSON(tb, s.AdminKey, http.MethodGet, "/users/"+strconv.Itoa(u.ID)+".json", nil, http.StatusOK, &shown)
	if u.APIKey = shown.User.APIKey; u.APIKey == "" {
		tb.Fatalf("redminetest: no API key for user %s", login)
	}
	return u
}

// AddMember makes user a member of project with a role holding exactly
// permissions (ConnectorPermissions if none).
func (s *Server) AddMember(tb TB, project string, user int, permissions ...string) {
	tb.Helper()
	role := s.Role(tb, permissions...)
	s.JSON(tb, s.AdminKey, http.MethodPost, "/projects/"+url.PathEscape(project)+"/memberships.json",
		map[string]any{"membership": map[string]any{"user_id": user, "role_ids": []int{role}}},
		http.StatusCreated, nil)
}

// Role returns the id of a role holding exactly permissions
// (ConnectorPermissions if none), creating it on first use. It sees
// issues under Redmine's default visibility (all but others' private
// issues) and takes the Developer role's workflow, so that edit_issues can
// change an issue's status.
func (s *Server) Role(tb TB, permissions ...string) int {
	tb.Helper()
	if len(permissions) == 0 {
		permissions = ConnectorPermissions
	}
	perms := append([]string(nil), permissions...)
	sort.Strings(perms)
	key := strings.Join(perms, " ")
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := s.roles[key]; ok {
		return id
	}
	name := fmt.Sprintf("Test role %d", len(s.roles)+1)
	form := url.Values{
		"role[name]":              {name},
		"role[assignable]":        {"1"},
		"role[issues_visibility]": {"default"},
		"role[users_visibility]":  {"members_of_visible_projects"},
		"role[permissions][]":     append(perms, ""),
	}
	if dev := s.roleID(tb, "Developer"); dev != 0 {
		form.Set("copy_workflow_from", strconv.Itoa(dev))
	}
	s.postForm(tb, "/roles", form)
	id := s.roleID(tb, name)
	if id == 0 {
		tb.Fatalf("redminetest: role %q not found after creating it", name)
	}
	s.roles[key] = id
	return id
}

func (s *Server) roleID(tb TB, name string) int {
	tb.Helper()
	var out struct {
		Roles []struct {
			ID   int
			Name string
		}
	}
	s.JSON(tb, s.AdminKey, http.MethodGet, "/roles.json", nil, http.StatusOK, &out)
	for _, r := range out.Roles {
		if r.Name == name {
			return r.ID
		}
	}
	return 0
}

// CreateIssue creates an issue in project (identifier or id) as the
// administrator and returns its id. fields are added to the issue object
// as the REST API takes them ("tracker_id", "is_private", "custom_fields":
// []map[string]any{{"id": 1, "value": "x"}}, ...), overriding the others.
func (s *Server) CreateIssue(tb TB, project, subject, description string, fields map[string]any) int {
	tb.Helper()
	issue := map[string]any{"project_id": project, "subject": subject, "description": description}
	for k, v := range fields {
		issue[k] = v
	}
	var out struct{ Issue struct{ ID int } }
	s.JSON(tb, s.AdminKey, http.MethodPost, "/issues.json", map[string]any{"issue": issue}, http.StatusCreated, &out)
	return out.Issue.ID
}

// AddNote adds a note to an issue as the administrator and returns its
// journal's id.
func (s *Server) AddNote(tb TB, issue int, text string, private bool) int {
	tb.Helper()
	path := "/issues/" + strconv.Itoa(issue) + ".json"
	s.JSON(tb, s.AdminKey, http.MethodPut, path, map[string]any{"issue": map[string]any{
		"notes": text, "private_notes": private,
	}}, http.StatusNoContent, nil)
	// The update answers no body: the note is the newest journal with
	// its text.
	var out struct {
		Issue struct {
			Journals []struct {
				ID    int
				Notes string
			}
		}
	}
	s.JSON(tb, s.AdminKey, http.MethodGet, path+"?include=journals", nil, http.StatusOK, &out)
	id := 0
	for _, j := range out.Issue.Journals {
		if j.Notes == text && j.ID > id {
			id = j.ID
		}
	}
	if id == 0 {
		tb.Fatalf("redminetest: the note added to issue %d is not among its journals", issue)
	}
	return id
}

// UploadAttachment attaches content to an issue as the administrator,
// the REST API's two steps (upload, then the issue update naming the
// upload's token), and returns the attachment's id.
func (s *Server) UploadAttachment(tb TB, issue int, name string, content []byte) int {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+"/uploads.json?filename="+url.QueryEscape(name), bytes.NewReader(content))
	if err != nil {
		tb.Fatalf("redminetest: %v", err)
	}
	// Any other type is refused (406): the body is the file itself.
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-Redmine-API-Key", s.AdminKey)
	resp, err := s.client.Do(req)
	if err != nil {
		tb.Fatalf("redminetest: uploading %s: %v", name, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		tb.Fatalf("redminetest: uploading %s: status %d: %s", name, resp.StatusCode, tail(body, 1000))
	}
	var up struct {
		Upload struct {
			ID    int
			Token string
		}
	}
	if err := json.Unmarshal(body, &up); err != nil || up.Upload.Token == "" {
		tb.Fatalf("redminetest: uploading %s: answer %q: %v", name, body, err)
	}
	s.JSON(tb, s.AdminKey, http.MethodPut, "/issues/"+strconv.Itoa(issue)+".json", map[string]any{"issue": map[string]any{
		"uploads": []map[string]any{{"token": up.Upload.Token, "filename": name, "content_type": http.DetectContentType(content)}},
	}}, http.StatusNoContent, nil)
	return up.Upload.ID
}

// CreateWikiPage creates (or replaces) a wiki page of project as the
// administrator. Redmine stores the title with spaces as underscores.
func (s *Server) CreateWikiPage(tb TB, project, title, text string) {
	tb.Helper()
	path := "/projects/" + url.PathEscape(project) + "/wiki/" + url.PathEscape(title) + ".json"
	status, body, err := s.Do(s.AdminKey, http.MethodPut, path, map[string]any{"wiki_page": map[string]any{"text": text}})
	if err != nil {
		tb.Fatalf("redminetest: PUT %s: %v", path, err)
	}
	// 201 for a new page, 204 for a new version of one.
	if status != http.StatusCreated && status != http.StatusNoContent {
		tb.Fatalf("redminetest: PUT %s: status %d: %s", path, status, tail(body, 1000))
	}
}

// CreateCustomField creates a text custom field of issues, for all
// projects and trackers, visible to everyone and filterable, and returns
// its id. Redmine limits its name to 30 characters.
func (s *Server) CreateCustomField(tb TB, name string) int {
	tb.Helper()
	var trackers struct{ Trackers []struct{ ID int } }
	s.JSON(tb, s.AdminKey, http.MethodGet, "/trackers.json", nil, http.StatusOK, &trackers)
	form := url.Values{
		"type":                       {"IssueCustomField"},
		"custom_field[field_format]": {"string"},
		"custom_field[name]":         {name},
		"custom_field[is_for_all]":   {"1"},
		"custom_field[visible]":      {"1"},
		"custom_field[is_filter]":    {"1"},
		"custom_field[searchable]":   {"1"},
		"custom_field[editable]":     {"1"},
	}
	for _, t := range trackers.Trackers {
		form.Add("custom_field[tracker_ids][]", strconv.Itoa(t.ID))
	}
	s.mu.Lock()
	s.postForm(tb, "/custom_fields", form)
	s.mu.Unlock()
	var out struct {
		CustomFields []struct {
			ID   int
			Name string
		} `json:"custom_fields"`
	}
	s.JSON(tb, s.AdminKey, http.MethodGet, "/custom_fields.json", nil, http.StatusOK, &out)
	for _, f := range out.CustomFields {
		if f.Name == name {
			return f.ID
		}
	}
	tb.Fatalf("redminetest: custom field %q not found after creating it", name)
	return 0
}

// CreateSavedQuery saves a public issue query of project and returns its
// id, for GET /issues.json?query_id=. filters are the issue list's
// parameters, as in the address of a filtered list: f[]=status_id,
// op[status_id]=o, v[status_id][]=...; without filters, open issues.
func (s *Server) CreateSavedQuery(tb TB, project, name string, filters url.Values) int {
	tb.Helper()
	form := url.Values{
		"type":              {"IssueQuery"},
		"query[name]":       {name},
		"query[visibility]": {"2"},
	}
	if len(filters) == 0 {
		filters = url.Values{"f[]": {"status_id"}, "op[status_id]": {"o"}}
	}
	for k, vs := range filters {
		form[k] = append(form[k], vs...)
	}
	s.mu.Lock()
	loc := s.postForm(tb, "/projects/"+url.PathEscape(project)+"/queries", form)
	s.mu.Unlock()
	// Redmine answers with the list it made: .../issues?query_id=N.
	u, err := url.Parse(loc)
	if err == nil {
		if id, err := strconv.Atoi(u.Query().Get("query_id")); err == nil {
			return id
		}
	}
	tb.Fatalf("redminetest: saving query %q: no query_id in the redirect to %q", name, loc)
	return 0
}

var csrfMeta = regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)"`)

// postForm posts an administration form as the signed-in administrator
// (signing in first) and returns where Redmine sends the browser: a
// form that succeeds redirects; one that fails is shown again, with its
// errors. s.mu must be held.
func (s *Server) postForm(tb TB, path string, form url.Values) string {
	tb.Helper()
	if s.web == nil {
		s.signIn(tb)
	}
	form.Set("authenticity_token", s.csrf)
	resp, err := s.web.PostForm(s.URL+path, form)
	if err != nil {
		tb.Fatalf("redminetest: POST %s: %v", path, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		tb.Fatalf("redminetest: POST %s: status %d, want a redirect: %s", path, resp.StatusCode, formErrors(body))
	}
	return resp.Header.Get("Location")
}

// signIn opens the administrator's browser session: the forms the REST
// API lacks take no API key. s.mu must be held.
func (s *Server) signIn(tb TB) {
	tb.Helper()
	jar, _ := cookiejar.New(nil)
	web := &http.Client{
		Jar:     jar,
		Timeout: 60 * time.Second,
		// The forms' answers are redirects to read, not to follow.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	token := func(path string) string {
		resp, err := web.Get(s.URL + path)
		if err != nil {
			tb.Fatalf("redminetest: GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := csrfMeta.FindSubmatch(body)
		if resp.StatusCode != http.StatusOK || m == nil {
			tb.Fatalf("redminetest: GET %s: status %d, no authenticity token", path, resp.StatusCode)
		}
		return html.UnescapeString(string(m[1]))
	}
	resp, err := web.PostForm(s.URL+"/login", url.Values{
		"username": {AdminLogin}, "password": {AdminPassword}, "authenticity_token": {token("/login")},
	})
	if err != nil {
		tb.Fatalf("redminetest: signing in: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		tb.Fatalf("redminetest: signing in as %s: status %d: %s", AdminLogin, resp.StatusCode, formErrors(body))
	}
	// Signing in starts a new session, with a token of its own.
	s.csrf = token("/my/account")
	s.web = web
}

var (
	errorBox = regexp.MustCompile(`(?s)<div id="errorExplanation">(.*?)</div>|<div class="flash error" id="flash_error">(.*?)</div>`)
	tags     = regexp.MustCompile(`<[^>]*>`)
)

// formErrors finds the messages of a form shown again.
func formErrors(body []byte) string {
	m := errorBox.FindSubmatch(body)
	if m == nil {
		return tail(body, 500)
	}
	text := string(m[1]) + string(m[2])
	return strings.Join(strings.Fields(html.UnescapeString(tags.ReplaceAllString(text, " "))), " ")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o600)
}

// dropFrames shortens Ruby's backtraces to their first frame, so that a
// log's tail shows the error's message rather than its deepest frames.
func dropFrames(log []byte) []byte {
	var out [][]byte
	dropped := 0
	for _, line := range bytes.Split(log, []byte("\n")) {
		frame := bytes.HasPrefix(bytes.TrimLeft(line, " \t"), []byte("from "))
		if frame && len(out) > 0 && bytes.HasPrefix(bytes.TrimLeft(out[len(out)-1], " \t"), []byte("from ")) {
			dropped++
			continue
		}
		if dropped > 0 {
			out = append(out, []byte(fmt.Sprintf("\t(%d more frames)", dropped)))
			dropped = 0
		}
		out = append(out, line)
	}
	if dropped > 0 {
		out = append(out, []byte(fmt.Sprintf("\t(%d more frames)", dropped)))
	}
	return bytes.Join(out, []byte("\n"))
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
