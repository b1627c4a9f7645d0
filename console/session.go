package console

import (
	"crypto/rand"
	"crypto/sha256"
	"sync"
	"time"
)

// maxSessions bounds the sessions kept. Past it, making one drops another:
// an expired one, else the oldest tokenless session never used since it
// was made, else the oldest tokenless one, else the oldest (its operator
// signs in again). So sessions made and thrown away (by a script, say)
// push out each other, not a browser's that is in use, and never a
// signed-in admin's while tokenless ones remain.
const maxSessions = 1000

// session is one signed-in browser. token is the admin token it signed in
// with ("" without admin tokens), presented to the admin API on its behalf.
type session struct {
	name    string
	token   string
	csrf    string
	expires time.Time
	key     [sha256.Size]byte
	// used: presented since it was made.
	used bool
}

// evictRank orders sessions for eviction: lower goes first.
func (s *session) evictRank() int {
	switch {
	case s.token == "" && !s.used:
		return 0
	case s.token == "":
		return 1
	}
	return 2
}

// sessions are kept in memory by the SHA-256 of their cookie's value, so
// that what is kept cannot be replayed as a cookie.
type sessions struct {
	ttl time.Duration
	max int
	mu  sync.Mutex
	m   map[[sha256.Size]byte]*session
}

func newSessions(ttl time.Duration, max int) *sessions {
	return &sessions{ttl: ttl, max: max, m: map[[sha256.Size]byte]*session{}}
}

// start makes a session; id is its cookie's value.
func (ss *sessions) start(now time.Time, name, token string) (s *session, id string) {
	id = rand.Text() + rand.Text() // 2 × 128 bits
	s = &session{name: name, token: token, csrf: rand.Text() + rand.Text(), expires: now.Add(ss.ttl), key: sha256.Sum256([]byte(id))}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.m) >= ss.max {
		var first *session
		for k, o := range ss.m {
			switch {
			case !o.expires.After(now):
				delete(ss.m, k)
			case first == nil, o.evictRank() < first.evictRank(),
				o.evictRank() == first.evictRank() && o.expires.Before(first.expires):
				first = o
			}
		}
		if len(ss.m) >= ss.max && first != nil {
			delete(ss.m, first.key)
		}
	}
	ss.m[s.key] = s
	return s, id
}

// get returns the live session of a cookie value, or nil.
func (ss *sessions) get(id string, now time.Time) *session {
	if id == "" || len(id) > 128 {
		return nil
	}
	k := sha256.Sum256([]byte(id))
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[k]
	if s == nil {
		return nil
	}
	if !s.expires.After(now) {
		delete(ss.m, k)
		return nil
	}
	s.used = true
	return s
}

// end forgets a session.
func (ss *sessions) end(s *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, s.key)
}
