package scheduler

import (
	"log/slog"
	"sync"

	"github.com/taskserver/taskserver/internal/appversion"
	"github.com/taskserver/taskserver/internal/protocol"
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
	// versionsByApp holds the usable versions: not deprecated, no plan
	// class (plan classes need host capability checks this scheduler does
	// not make), of an app that is not deprecated, at least its min_version,
	// with a readable file list.
	versionsByApp map[int64][]row.AppVersion
	// docs are the versions' xml_doc, read: their files (none for a
	// version only the simulated client can run) and cmdline.
	docs map[int64]appversion.Version
	// unreadable are the versions whose xml_doc cannot be read: never sent,
	// since a client given them could run nothing.
	unreadable map[int64]error
}

func newCatalog(t shmcache.Tables, gen uint64) *catalog {
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
		if !ok || a.Deprecated || v.Deprecated || v.PlanClass != "" || v.VersionNum < a.MinVersion {
			continue
		}
		c.versionsByApp[v.AppID] = append(c.versionsByApp[v.AppID], v)
	}
	return c
}

// version is the app version chosen to run a job on a host.
type version struct {
	app        row.App
	av         row.AppVersion // ID 0 for an anonymous-platform client's own build
	platform   string         // the name sent in <result><platform>
	anonymous  bool
	versionNum int
	// files are the version's files to send with it (none for an
	// anonymous-platform client or a version without files).
	files []appversion.File
	// cmdline is the version's command-line arguments (none for an
	// anonymous-platform client: its app_info.xml has its own).
	cmdline string
}

// choose is chooseFor a volunteer who does not run beta versions.
func (c *catalog) choose(req *protocol.SchedulerRequest) map[int64]version {
	return c.chooseFor(req, false)
}

// chooseFor returns, for each app the host can run, the version to send:
// the highest version_num on any of the host's platforms, the primary
// platform winning a tie. Unless allowBeta, a version that is not a beta
// beats every beta one; an app with only beta versions gets its best beta,
// which the walk refuses with reason beta (so the refusal says why).
func (c *catalog) chooseFor(req *protocol.SchedulerRequest, allowBeta bool) map[int64]version {
	out := map[int64]version{}
	if req.PlatformName == anonymousPlatform {
		for _, cv := range req.AppVersions {
			a, ok := c.appByName[cv.AppName]
			if !ok || cv.PlanClass != "" {
				continue
			}
			if cur, ok := out[a.ID]; ok && cur.versionNum >= cv.VersionNum {
				continue
			}
			out[a.ID] = version{app: a, platform: cv.Platform, anonymous: true, versionNum: cv.VersionNum}
		}
		return out
	}
	names := []string{req.PlatformName}
	for _, alt := range req.AltPlatforms {
		names = append(names, alt.Name)
	}
	rank := map[int64]int{} // platform id → preference, lower is better
	for i, n := range names {
		if p, ok := c.platformByName[n]; ok {
			if _, seen := rank[p.ID]; !seen {
				rank[p.ID] = i
			}
		}
	}
	if len(rank) == 0 {
		return out
	}
	for appID, vs := range c.versionsByApp {
		best, bestRank, found := row.AppVersion{}, 0, false
		for _, v := range vs {
			r, ok := rank[v.PlatformID]
			if !ok {
				continue
			}
			if found && !allowBeta && v.Beta != best.Beta {
				if !v.Beta {
					best, bestRank = v, r
				}
				continue
			}
			if !found || v.VersionNum > best.VersionNum || (v.VersionNum == best.VersionNum && r < bestRank) {
				best, bestRank, found = v, r, true
			}
		}
		if found {
			out[appID] = c.project(best)
		}
	}
	return out
}

// forResend returns the version a result in progress was sent with, so that
// a resend names the same build; if that version is gone or unreadable, the
// current choice for the app. A client on the anonymous platform runs only
// its own builds: the result is resent for the build of the app it lists
// with the version number the result was sent with, else for its current
// choice, and not at all when it lists none (never with the project's
// version and files, which it would not run).
func (c *catalog) forResend(req *protocol.SchedulerRequest, appID, avID int64, avNum int, chosen map[int64]version) (version, bool) {
	if req.PlatformName == anonymousPlatform {
		v, ok := chosen[appID]
		if !ok {
			return version{}, false
		}
		for _, cv := range req.AppVersions {
			if cv.AppName == v.app.Name && cv.VersionNum == avNum && cv.PlanClass == "" {
				v.versionNum, v.platform = avNum, cv.Platform
				break
			}
		}
		return v, true
	}
	if v, ok := c.versionByID[avID]; ok && avID != 0 && c.unreadable[avID] == nil {
		return c.project(v), true
	}
	v, ok := chosen[appID]
	return v, ok
}

// project is the project's version v, to send with its files and cmdline.
func (c *catalog) project(v row.AppVersion) version {
	d := c.docs[v.ID]
	return version{app: c.appByID[v.AppID], av: v, files: d.Files, cmdline: d.Cmdline,
		platform: c.platformByID[v.PlatformID].Name, versionNum: v.VersionNum}
}

// catalogCache rebuilds the index only when the feeder republishes.
type catalogCache struct {
	mu  sync.Mutex
	cur *catalog
	src Cache
	// log, if set, hears of unreadable app versions once per rebuild.
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
		cc.cur, cc.src = newCatalog(t, gen), c
		if cc.log != nil {
			for id, err := range cc.cur.unreadable {
				cc.log.Error("app version not sent: its xml_doc is unreadable (re-add it with taskctl app-version add --file)",
					"app_version_id", id, "error", err)
			}
		}
	}
	return cc.cur, nil
}
