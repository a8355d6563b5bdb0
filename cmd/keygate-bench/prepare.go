package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"

	"go.uber.org/zap"

	"github.com/keygate/keygate/caddymodule"
	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/patch"
	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/upstreams/contracts"
	"github.com/keygate/keygate/upstreams/share"
)

// preparedBaseURL is the public base URL of the stores while they are
// filled; links are made when read, so the gateway's own is what clients see.
const preparedBaseURL = "http://127.0.0.1"

// dataset is what a prepared store holds that the load needs.
type dataset struct {
	contractsToken, shareToken string
	contractID, shareUUID      string
	templates                  []string
	creators                   []string
	projects                   []string
}

// prepare fills st's database through the storage module and the stores
// the gateway uses, on either backend, from many goroutines so their
// writes share commits.
func prepare(st store, keys, contractCount, shareCount int) (*dataset, error) {
	masterKey, err := seal.LoadOrCreateMasterKey(filepath.Join(st.dir, "master.key"))
	if err != nil {
		return nil, err
	}
	sealer, err := seal.New(masterKey)
	if err != nil {
		return nil, err
	}
	stores, err := st.storage.OpenStores(caddymodule.StorageEnv{DataDir: st.dir, MasterKey: masterKey, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer stores.DB.Close()
	ks, err := keystore.Open(stores.Keys, sealer, nil)
	if err != nil {
		return nil, err
	}
	d := &dataset{}
	for i := 0; i < 20; i++ {
		d.templates = append(d.templates, fmt.Sprintf("PAGE-%d", 1000+i))
	}
	for i := 0; i < 50; i++ {
		d.creators = append(d.creators, fmt.Sprintf("user-%02d", i))
	}
	for i := 0; i < 100; i++ {
		d.projects = append(d.projects, fmt.Sprintf("%d", 10000+i))
	}

	ck, err := ks.Create(keyInput(access.ServiceContracts, d.creators[0], "get", "search", "create", "archive", "delete"))
	if err != nil {
		return nil, err
	}
	sk, err := ks.Create(keyInput(access.ServiceShare, d.creators[0], "get", "list", "create", "delete"))
	if err != nil {
		return nil, err
	}
	d.contractsToken, d.shareToken = ck.Token, sk.Token
	if err := parallel(keys-1, func(i int) error {
		_, err := ks.Create(keyInput(access.ServiceContracts, d.creators[i%len(d.creators)], "get"))
		return err
	}); err != nil {
		return nil, err
	}

	templates, err := contracts.NewTemplates(stores.DB, stores.Templates)
	if err != nil {
		return nil, err
	}
	for _, id := range d.templates {
		if _, err := templates.Put(contracts.Template{ID: id, CollectionID: "SPACE", Title: "Agreement " + id, Body: "The parties agree."}); err != nil {
			return nil, err
		}
	}
	cs, err := contracts.NewStore(contracts.Config{DB: stores.DB, Backend: stores.Contracts, Templates: templates, Sealer: sealer, PublicBaseURL: preparedBaseURL})
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	if err := parallel(contractCount, func(i int) error {
		var in contracts.CreateRequest
		if err := json.Unmarshal(contractBody(d.templates[i%len(d.templates)], i), &in); err != nil {
			return err
		}
		c, err := cs.Create(context.Background(), d.creators[(i/len(d.templates))%len(d.creators)], &in)
		if err != nil {
			return err
		}
		mu.Lock()
		if d.contractID == "" {
			d.contractID = c.ID
		}
		mu.Unlock()
		return nil
	}); err != nil {
		return nil, err
	}

	ss, err := share.NewStore(share.Config{DB: stores.DB, Backend: stores.Shares, CookieKey: masterKey, PublicBaseURL: preparedBaseURL})
	if err != nil {
		return nil, err
	}
	owner := &access.Identity{Owner: d.creators[0], Service: access.ServiceShare, AdminProjects: []string{"*"}}
	if err := parallel(shareCount, func(i int) error {
		var in share.CreateRequest
		body := fmt.Sprintf(`{"type":"JQL","projectId":%q,"jql":"project = P%d"}`, d.projects[i%len(d.projects)], i%len(d.projects))
		if err := json.Unmarshal([]byte(body), &in); err != nil {
			return err
		}
		s, err := ss.Create(context.Background(), owner, &in)
		if err != nil {
			return err
		}
		mu.Lock()
		if d.shareUUID == "" {
			d.shareUUID = s.UUID
		}
		mu.Unlock()
		return nil
	}); err != nil {
		return nil, err
	}
	if err := ss.Flush(); err != nil {
		return nil, err
	}
	if db, ok := stores.DB.(*pgdb.DB); ok {
		// A database in use has its planner statistics and visibility
		// map from autovacuum, and the pages of a bulk load written out
		// by checkpoints long ago; one just filled has not, and
		// autovacuum and a checkpoint would catch up in the middle of
		// the measurements.
		for _, sql := range []string{"VACUUM (ANALYZE)", "CHECKPOINT"} {
			if _, err := db.Pool.Exec(context.Background(), sql); err != nil {
				return nil, err
			}
		}
	}
	return d, nil
}

func keyInput(s access.Service, owner string, privs ...string) *keystore.KeyInput {
	in := &keystore.KeyInput{}
	in.Service = patch.Some(string(s))
	in.Name = patch.Some("bench")
	in.Owner = patch.Some(owner)
	in.Privileges = patch.Some(privs)
	if s == access.ServiceShare {
		in.AdminProjects = patch.Some([]string{"*"})
	}
	return in
}

var signerNames = []string{"Zoë Ångström", "Dmitri Brook", "Ana Lima", "Kenji Sato", "Amara Okafor", "Lars Berg"}

// contractBody is a create request with two signers whose names vary, so
// substring searches have to look at every contract.
func contractBody(template string, i int) []byte {
	a, b := signerNames[i%len(signerNames)], signerNames[(i/len(signerNames))%len(signerNames)]
	name := fmt.Sprintf("Agreement %d", i)
	if i%1000 == 0 {
		name = fmt.Sprintf("ACME supply %d", i)
	}
	body, _ := json.Marshal(map[string]any{
		"templateId": template,
		"name":       name,
		"signers": []map[string]any{
			{"fullName": a, "accessKind": "url", "otpMethod": "none"},
			{"fullName": b, "accessKind": "email", "email": fmt.Sprintf("signer%d@example.com", i)},
		},
	})
	return body
}

// parallel runs fn(0..n-1) on 64 goroutines and returns the first error.
func parallel(n int, fn func(i int) error) error {
	if n <= 0 {
		return nil
	}
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	next := make(chan int)
	for w := 0; w < 64; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}
