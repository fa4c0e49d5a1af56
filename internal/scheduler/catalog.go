package scheduler

import (
	"log/slog"
	"sync"

	"github.com/taskserver/taskserver/internal/appversion"
	"github.com/taskserver/taskserver/internal/planclass"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/shmcache"
)

// anonymousPlatform is the platform_name of a client that runs its own app
// builds (app_info.xml): it is sent no app versions, only jobs for the
// versions it lists (PROTOCOL.md §5.5).
const anonymousPlatform = "anonymous"

// catalog indexes the static tables the feeder publishes.
type catalog struct {
	gen            uint64
	platformByName map[string]row.Platform // not deprecated
	platformByID   map[int64]row.Platform  // all
	appByID        map[int64]row.App       // all
	appByName      map[string]row.App      // not deprecated
	versionByID    map[int64]row.AppVersion
	// versionsByApp holds the usable versions: not deprecated, of an app
	// that is not deprecated, at least its min_version, with a readable
	// file list and a plan class that is none or one the project defines;
	// of those, only the latest of each platform, plan class and beta flag
	// (a new build replaces the old one, as BOINC's feeder does, while a
	// beta build does not hide the stable one from volunteers who run no
	// beta work).
	versionsByApp map[int64][]row.AppVersion
	// docs are the versions' xml_doc, read: their files (none for a
	// version only the simulated client can run) and cmdline.
	docs map[int64]appversion.Version
	// unreadable are the versions whose xml_doc cannot be read: never sent,
	// since a client given them could run nothing.
	unreadable map[int64]error
	// unknownPlan are the versions whose plan class the project does not
	// define (--plan-class-spec): never sent, since no host can be checked
	// against it.
	unknownPlan map[int64]string
}

// newCatalog indexes the tables; plans are the project's plan classes
// (nil: none).
func newCatalog(t shmcache.Tables, gen uint64, plans *planclass.Specs) *catalog {
	c := &catalog{
		gen:            gen,
		platformByName: map[string]row.Platform{},
		platformByID:   map[int64]row.Platform{},
		appByID:        map[int64]row.App{},
		appByName:      map[string]row.App{},
		versionByID:    map[int64]row.AppVersion{},
		versionsByApp:  map[int64][]row.AppVersion{},
		docs:           map[int64]appversion.Version{},
		unreadable:     map[int64]error{},
		unknownPlan:    map[int64]string{},
	}
	for _, p := range t.Platforms {
		c.platformByID[p.ID] = p
		if !p.Deprecated {
			c.platformByName[p.Name] = p
		}
	}
	for _, a := range t.Apps {
		c.appByID[a.ID] = a
		if !a.Deprecated {
			c.appByName[a.Name] = a
		}
	}
	for _, v := range t.AppVersions {
		c.versionByID[v.ID] = v
		doc, err := appversion.Parse(v.XMLDoc)
		if err != nil {
			c.unreadable[v.ID] = err
			continue
		}
		c.docs[v.ID] = doc
		a, ok := c.appByID[v.AppID]
		if !ok || a.Deprecated || v.Deprecated || v.VersionNum < a.MinVersion {
			continue
		}
		if v.PlanClass != "" {
			if !planKnown(plans, v.PlanClass) {
				c.unknownPlan[v.ID] = v.PlanClass
				continue
			}
		}
		c.versionsByApp[v.AppID] = latest(c.versionsByApp[v.AppID], v)
	}
	return c
}

// latest adds v to vs, the versions of one app, unless a later one of the
// same platform, plan class and beta flag is there; a later v replaces it.
func latest(vs []row.AppVersion, v row.AppVersion) []row.AppVersion {
	for i, o := range vs {
		if o.PlatformID == v.PlatformID && o.PlanClass == v.PlanClass && o.Beta == v.Beta {
			if v.VersionNum > o.VersionNum {
				vs[i] = v
			}
			return vs
		}
	}
	return append(vs, v)
}

// project is the project's version v, to send with its files and cmdline;
// its usage and rate on the host are the choice's to fill.
func (c *catalog) project(v row.AppVersion) version {
	d := c.docs[v.ID]
	return version{app: c.appByID[v.AppID], av: v, files: d.Files, cmdline: d.Cmdline,
		platform: c.platformByID[v.PlatformID].Name, versionNum: v.VersionNum, planClass: v.PlanClass}
}

// planKnown reports whether the project defines plan class name.
func planKnown(plans *planclass.Specs, name string) bool {
	return plans.Has(name)
}

// catalogCache rebuilds the index only when the feeder republishes.
type catalogCache struct {
	mu  sync.Mutex
	cur *catalog
	src Cache
	// plans are the project's plan classes.
	plans *planclass.Specs
	// log, if set, hears of unreadable app versions and unknown plan
	// classes once per rebuild.
	log *slog.Logger
}

func (cc *catalogCache) get(c Cache) (*catalog, error) {
	t, gen, err := c.Tables()
	if err != nil {
		return nil, err
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	// The generation counts publications in one file; a replaced file
	// starts again, so the mapping is part of the key.
	if cc.cur == nil || cc.cur.gen != gen || cc.src != c {
		cc.cur, cc.src = newCatalog(t, gen, cc.plans), c
		if cc.log != nil {
			for id, err := range cc.cur.unreadable {
				cc.log.Error("app version not sent: its xml_doc is unreadable (re-add it with taskctl app-version add --file)",
					"app_version_id", id, "error", err)
			}
			for id, pc := range cc.cur.unknownPlan {
				cc.log.Error("app version not sent: its plan class is not defined (--plan-class-spec)",
					"app_version_id", id, "plan_class", pc)
			}
		}
	}
	return cc.cur, nil
}
