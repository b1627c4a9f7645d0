package console

import (
	"crypto/rand"
	"crypto/sha256"
	"sync"
	"time"
)

// maxSessions bounds the sessions kept: past it the oldest is dropped
// (its operator signs in again).
const maxSessions = 1000

// session is one signed-in browser. token is the admin token it signed in
// with ("" without admin tokens), presented to the admin API on its behalf.
type session struct {
	name    string
	token   string
	csrf    string
	expires time.Time
	key     [sha256.Size]byte
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
		var oldest *session
		for k, o := range ss.m {
			if !o.expires.After(now) {
				delete(ss.m, k)
			} else if oldest == nil || o.expires.Before(oldest.expires) {
				oldest = o
			}
		}
		if len(ss.m) >= ss.max && oldest != nil {
			delete(ss.m, oldest.key)
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
	return s
}

// end forgets a session.
func (ss *sessions) end(s *session) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, s.key)
}
