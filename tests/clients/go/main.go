// gomemcache (github.com/bradfitz/gomemcache, ascii protocol) against one
// server. Run by tests/clients/go_gomemcache.sh:
//
//	go run . -addr 127.0.0.1:11211
//
// Prints one "PASS name" / "FAIL name: why" line per check and ends with
// "gomemcache: N passed, M failed"; exits 1 if any check failed.
// Every expectation was validated against memcached 1.6.18.
package main

import (
	"bytes"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

var (
	addr     = flag.String("addr", "127.0.0.1:11211", "server host:port")
	prefix   = fmt.Sprintf("gomc_%d_", time.Now().UnixNano()%1000000)
	passed   int
	failed   int
	failures []string
)

func k(name string) string { return prefix + name }

func check(name string, fn func() error) {
	t0 := time.Now()
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		return fn()
	}()
	if err != nil {
		failed++
		failures = append(failures, fmt.Sprintf("FAIL %s: %v", name, err))
		fmt.Println(failures[len(failures)-1])
	} else {
		passed++
		fmt.Printf("PASS %s (%d ms)\n", name, time.Since(t0).Milliseconds())
	}
}

func errf(format string, a ...interface{}) error { return fmt.Errorf(format, a...) }

// wantErr: err must be `want` (errors.Is).
func wantErr(call string, err, want error) error {
	if !errors.Is(err, want) {
		return errf("%s: got error %v, want %v", call, err, want)
	}
	return nil
}

func wantValue(c *memcache.Client, key string, want []byte) error {
	it, err := c.Get(key)
	if err != nil {
		return errf("Get(%q): %v", key, err)
	}
	if !bytes.Equal(it.Value, want) {
		return errf("Get(%q): value %s, want %s", key, short(it.Value), short(want))
	}
	return nil
}

func short(b []byte) string {
	if len(b) > 40 {
		return fmt.Sprintf("%q...(%d bytes)", b[:40], len(b))
	}
	return fmt.Sprintf("%q", b)
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return b
}

func main() {
	flag.Parse()
	c := memcache.New(*addr)
	c.Timeout = 10 * time.Second
	c.MaxIdleConns = 16
	fmt.Printf("gomemcache against %s, key prefix %s\n", *addr, prefix)

	check("ping", func() error { return c.Ping() })

	check("set_get_string", func() error {
		if err := c.Set(&memcache.Item{Key: k("s"), Value: []byte("hello world")}); err != nil {
			return errf("Set: %v", err)
		}
		if err := wantValue(c, k("s"), []byte("hello world")); err != nil {
			return err
		}
		// overwrite
		if err := c.Set(&memcache.Item{Key: k("s"), Value: []byte("second")}); err != nil {
			return errf("Set (overwrite): %v", err)
		}
		return wantValue(c, k("s"), []byte("second"))
	})

	check("binary_all_256_bytes", func() error {
		v := make([]byte, 0, 512)
		for i := 0; i < 256; i++ {
			v = append(v, byte(i))
		}
		v = append(v, []byte("\r\nEND\r\n\x00")...) // protocol-looking bytes inside the value
		if err := c.Set(&memcache.Item{Key: k("bin"), Value: v}); err != nil {
			return errf("Set: %v", err)
		}
		return wantValue(c, k("bin"), v)
	})

	check("empty_value", func() error {
		if err := c.Set(&memcache.Item{Key: k("empty"), Value: []byte{}}); err != nil {
			return errf("Set: %v", err)
		}
		return wantValue(c, k("empty"), []byte{})
	})

	check("value_500k", func() error {
		v := randBytes(500 * 1024)
		if err := c.Set(&memcache.Item{Key: k("big"), Value: v}); err != nil {
			return errf("Set 500 KB: %v", err)
		}
		return wantValue(c, k("big"), v)
	})

	check("get_missing", func() error {
		_, err := c.Get(k("missing"))
		return wantErr("Get(missing)", err, memcache.ErrCacheMiss)
	})

	check("add", func() error {
		if err := c.Add(&memcache.Item{Key: k("add"), Value: []byte("first")}); err != nil {
			return errf("Add (new key): %v", err)
		}
		err := c.Add(&memcache.Item{Key: k("add"), Value: []byte("second")})
		if e := wantErr("Add (existing key)", err, memcache.ErrNotStored); e != nil {
			return e
		}
		return wantValue(c, k("add"), []byte("first"))
	})

	check("replace", func() error {
		err := c.Replace(&memcache.Item{Key: k("repl"), Value: []byte("x")})
		if e := wantErr("Replace (missing key)", err, memcache.ErrNotStored); e != nil {
			return e
		}
		if _, err := c.Get(k("repl")); !errors.Is(err, memcache.ErrCacheMiss) {
			return errf("Get after failed Replace: %v, want cache miss", err)
		}
		if err := c.Set(&memcache.Item{Key: k("repl"), Value: []byte("a")}); err != nil {
			return errf("Set: %v", err)
		}
		if err := c.Replace(&memcache.Item{Key: k("repl"), Value: []byte("b")}); err != nil {
			return errf("Replace (existing key): %v", err)
		}
		return wantValue(c, k("repl"), []byte("b"))
	})

	check("delete", func() error {
		if err := c.Set(&memcache.Item{Key: k("del"), Value: []byte("x")}); err != nil {
			return errf("Set: %v", err)
		}
		if err := c.Delete(k("del")); err != nil {
			return errf("Delete: %v", err)
		}
		if _, err := c.Get(k("del")); !errors.Is(err, memcache.ErrCacheMiss) {
			return errf("Get after Delete: %v, want cache miss", err)
		}
		return wantErr("Delete (missing key)", c.Delete(k("del")), memcache.ErrCacheMiss)
	})

	check("incr_decr", func() error {
		key := k("ctr")
		if _, err := c.Increment(key, 1); !errors.Is(err, memcache.ErrCacheMiss) {
			return errf("Increment(missing): %v, want cache miss", err)
		}
		if _, err := c.Decrement(key, 1); !errors.Is(err, memcache.ErrCacheMiss) {
			return errf("Decrement(missing): %v, want cache miss", err)
		}
		if err := c.Set(&memcache.Item{Key: key, Value: []byte("10")}); err != nil {
			return errf("Set: %v", err)
		}
		if v, err := c.Increment(key, 5); err != nil || v != 15 {
			return errf("Increment(10, 5) = %d, %v; want 15", v, err)
		}
		if v, err := c.Decrement(key, 3); err != nil || v != 12 {
			return errf("Decrement(15, 3) = %d, %v; want 12", v, err)
		}
		if v, err := c.Decrement(key, 100); err != nil || v != 0 {
			return errf("Decrement(12, 100) = %d, %v; want 0 (no wrap below 0)", v, err)
		}
		it, err := c.Get(key)
		if err != nil || strings.TrimRight(string(it.Value), " ") != "0" {
			return errf("Get after decr to 0: %v %v, want \"0\" (space padded)", it, err)
		}
		if err := c.Set(&memcache.Item{Key: key, Value: []byte("18446744073709551615")}); err != nil {
			return errf("Set 2^64-1: %v", err)
		}
		if v, err := c.Increment(key, 1); err != nil || v != 0 {
			return errf("Increment(2^64-1, 1) = %d, %v; want 0 (wrap)", v, err)
		}
		if v, err := c.Increment(key, 18446744073709551615); err != nil || v != 18446744073709551615 {
			return errf("Increment(0, 2^64-1) = %d, %v; want 2^64-1", v, err)
		}
		if err := c.Set(&memcache.Item{Key: key, Value: []byte("abc")}); err != nil {
			return errf("Set abc: %v", err)
		}
		if _, err := c.Increment(key, 1); err == nil || !strings.Contains(err.Error(), "client error") {
			return errf("Increment(non-numeric) error = %v, want a memcache client error", err)
		}
		// the connection is still usable after the CLIENT_ERROR
		return wantValue(c, key, []byte("abc"))
	})

	check("cas", func() error {
		key := k("cas")
		if err := c.Set(&memcache.Item{Key: key, Value: []byte("v1")}); err != nil {
			return errf("Set: %v", err)
		}
		it, err := c.Get(key)
		if err != nil {
			return errf("Get: %v", err)
		}
		if it.CasID == 0 {
			return errf("Get returned CasID 0")
		}
		stale := *it
		it.Value = []byte("v2")
		if err := c.CompareAndSwap(it); err != nil {
			return errf("CompareAndSwap (fresh cas %d): %v", it.CasID, err)
		}
		stale.Value = []byte("v3")
		if e := wantErr("CompareAndSwap (stale cas)", c.CompareAndSwap(&stale), memcache.ErrCASConflict); e != nil {
			return e
		}
		if err := wantValue(c, key, []byte("v2")); err != nil {
			return err
		}
		it2, err := c.Get(key)
		if err != nil {
			return errf("Get: %v", err)
		}
		if it2.CasID == stale.CasID {
			return errf("CasID did not change after a successful cas (%d)", it2.CasID)
		}
		if err := c.Delete(key); err != nil {
			return errf("Delete: %v", err)
		}
		return wantErr("CompareAndSwap (deleted key)", c.CompareAndSwap(it2), memcache.ErrCacheMiss)
	})

	check("append_prepend", func() error {
		key := k("ap")
		if e := wantErr("Append (missing key)", c.Append(&memcache.Item{Key: key, Value: []byte("x")}), memcache.ErrNotStored); e != nil {
			return e
		}
		if e := wantErr("Prepend (missing key)", c.Prepend(&memcache.Item{Key: key, Value: []byte("x")}), memcache.ErrNotStored); e != nil {
			return e
		}
		if err := c.Set(&memcache.Item{Key: key, Value: []byte("middle"), Flags: 42}); err != nil {
			return errf("Set: %v", err)
		}
		if err := c.Append(&memcache.Item{Key: key, Value: []byte("-end")}); err != nil {
			return errf("Append: %v", err)
		}
		if err := c.Prepend(&memcache.Item{Key: key, Value: []byte("start-"), Flags: 7}); err != nil {
			return errf("Prepend: %v", err)
		}
		it, err := c.Get(key)
		if err != nil {
			return errf("Get: %v", err)
		}
		if string(it.Value) != "start-middle-end" || it.Flags != 42 {
			return errf("after append/prepend: value %q flags %d, want \"start-middle-end\" flags 42", it.Value, it.Flags)
		}
		return nil
	})

	check("flags", func() error {
		for _, f := range []uint32{0, 1, 0xABCD, 0xDEADBEEF, 0xFFFFFFFF} {
			key := k(fmt.Sprintf("flags_%d", f))
			if err := c.Set(&memcache.Item{Key: key, Value: []byte("f"), Flags: f}); err != nil {
				return errf("Set flags %d: %v", f, err)
			}
			it, err := c.Get(key)
			if err != nil {
				return errf("Get: %v", err)
			}
			if it.Flags != f {
				return errf("flags %d came back as %d", f, it.Flags)
			}
		}
		return nil
	})

	// touch / gat / expiry: the keys are set here with a 1 s TTL, checked after
	// sleeping 2.1 s.
	var ttlSet time.Time
	check("touch_gat_setup", func() error {
		ttlSet = time.Now()
		for _, n := range []string{"exp", "touch", "gat"} {
			if err := c.Set(&memcache.Item{Key: k(n), Value: []byte("ttl-" + n), Expiration: 1}); err != nil {
				return errf("Set %s ttl 1: %v", n, err)
			}
		}
		// incr and append keep the item's expiry
		if err := c.Set(&memcache.Item{Key: k("ctr_ttl"), Value: []byte("5"), Expiration: 1}); err != nil {
			return errf("Set counter ttl 1: %v", err)
		}
		if v, err := c.Increment(k("ctr_ttl"), 1); err != nil || v != 6 {
			return errf("Increment of a counter with ttl 1 = %d, %v; want 6", v, err)
		}
		if err := c.Set(&memcache.Item{Key: k("ap_ttl"), Value: []byte("a"), Expiration: 1}); err != nil {
			return errf("Set ttl 1: %v", err)
		}
		if err := c.Append(&memcache.Item{Key: k("ap_ttl"), Value: []byte("b")}); err != nil {
			return errf("Append to a key with ttl 1: %v", err)
		}
		if err := c.Touch(k("touch"), 100); err != nil {
			return errf("Touch(100): %v", err)
		}
		it, err := c.GetAndTouch(k("gat"), 100)
		if err != nil {
			return errf("GetAndTouch(100): %v", err)
		}
		if string(it.Value) != "ttl-gat" {
			return errf("GetAndTouch value %q, want \"ttl-gat\"", it.Value)
		}
		if e := wantErr("Touch(missing)", c.Touch(k("nope"), 10), memcache.ErrCacheMiss); e != nil {
			return e
		}
		_, err = c.GetAndTouch(k("nope"), 10)
		return wantErr("GetAndTouch(missing)", err, memcache.ErrCacheMiss)
	})

	check("multi_get_100", func() error {
		keys := make([]string, 100)
		for i := range keys {
			keys[i] = k(fmt.Sprintf("multi_%d", i))
			if i%5 == 4 {
				continue // every 5th key is a miss
			}
			if err := c.Set(&memcache.Item{Key: keys[i], Value: []byte(fmt.Sprintf("value-%d", i)), Flags: uint32(i)}); err != nil {
				return errf("Set %s: %v", keys[i], err)
			}
		}
		m, err := c.GetMulti(keys)
		if err != nil {
			return errf("GetMulti: %v", err)
		}
		if len(m) != 80 {
			return errf("GetMulti returned %d items, want 80", len(m))
		}
		for i, key := range keys {
			it, ok := m[key]
			if i%5 == 4 {
				if ok {
					return errf("GetMulti returned a value for missing key %s", key)
				}
				continue
			}
			if !ok || string(it.Value) != fmt.Sprintf("value-%d", i) || it.Flags != uint32(i) {
				return errf("GetMulti[%s] = %+v, want value-%d flags %d", key, it, i, i)
			}
		}
		return nil
	})

	check("key_length", func() error {
		long := prefix + strings.Repeat("k", 250-len(prefix))
		if len(long) != 250 {
			return errf("test bug: key length %d", len(long))
		}
		if err := c.Set(&memcache.Item{Key: long, Value: []byte("long key")}); err != nil {
			return errf("Set 250-byte key: %v", err)
		}
		if err := wantValue(c, long, []byte("long key")); err != nil {
			return err
		}
		if e := wantErr("Set 251-byte key", c.Set(&memcache.Item{Key: long + "x", Value: []byte("x")}), memcache.ErrMalformedKey); e != nil {
			return e
		}
		if _, err := c.Get(long + "x"); !errors.Is(err, memcache.ErrMalformedKey) {
			return errf("Get 251-byte key: %v, want ErrMalformedKey", err)
		}
		if e := wantErr("Set key with a space", c.Set(&memcache.Item{Key: k("a b"), Value: []byte("x")}), memcache.ErrMalformedKey); e != nil {
			return e
		}
		if e := wantErr("Set key with a newline", c.Set(&memcache.Item{Key: k("a\r\nb"), Value: []byte("x")}), memcache.ErrMalformedKey); e != nil {
			return e
		}
		// UTF-8 (bytes >= 0x80) is legal in an ascii key
		utf8 := k("ключ_キー_€")
		if err := c.Set(&memcache.Item{Key: utf8, Value: []byte("utf8 key")}); err != nil {
			return errf("Set UTF-8 key: %v", err)
		}
		if err := wantValue(c, utf8, []byte("utf8 key")); err != nil {
			return err
		}
		if m, err := c.GetMulti([]string{utf8, k("s")}); err != nil || m[utf8] == nil || string(m[utf8].Value) != "utf8 key" {
			return errf("GetMulti with a UTF-8 key: %v %v", m, err)
		}
		return wantValue(c, k("s"), []byte("second"))
	})

	check("value_too_large_2mb", func() error {
		key := k("huge")
		if err := c.Set(&memcache.Item{Key: key, Value: []byte("old")}); err != nil {
			return errf("Set old: %v", err)
		}
		err := c.Set(&memcache.Item{Key: key, Value: randBytes(2 * 1024 * 1024)})
		if err == nil {
			return errf("Set 2 MB value succeeded, want a server error")
		}
		fmt.Printf("  (Set 2 MB: %v)\n", err)
		if !strings.Contains(err.Error(), "SERVER_ERROR") {
			return errf("Set 2 MB: error %v, want one carrying SERVER_ERROR", err)
		}
		// memcached swallows the data and unlinks the old item
		if _, err := c.Get(key); !errors.Is(err, memcache.ErrCacheMiss) {
			return errf("Get of the key after a too-large Set: %v, want cache miss (memcached drops the old value)", err)
		}
		if err := wantValue(c, k("s"), []byte("second")); err != nil {
			return errf("after the failed Set: %v", err)
		}
		if err := c.Set(&memcache.Item{Key: key, Value: []byte("small")}); err != nil {
			return errf("Set small after failure: %v", err)
		}
		return wantValue(c, key, []byte("small"))
	})

	check("concurrent_8x2000", func() error {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < 2000; i++ {
					key := k(fmt.Sprintf("conc_%d_%d", g, i))
					val := []byte(fmt.Sprintf("g%d-i%d-%s", g, i, strings.Repeat("v", i%97)))
					if err := c.Set(&memcache.Item{Key: key, Value: val, Flags: uint32(i)}); err != nil {
						errs <- errf("goroutine %d: Set %s: %v", g, key, err)
						return
					}
					it, err := c.Get(key)
					if err != nil {
						errs <- errf("goroutine %d: Get %s: %v", g, key, err)
						return
					}
					if !bytes.Equal(it.Value, val) || it.Flags != uint32(i) {
						errs <- errf("goroutine %d: Get %s = %s flags %d, want %s flags %d", g, key, short(it.Value), it.Flags, short(val), i)
						return
					}
				}
			}(g)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			return err
		}
		// and read everything back once more with GetMulti
		for g := 0; g < 8; g++ {
			keys := make([]string, 0, 2000)
			for i := 0; i < 2000; i++ {
				keys = append(keys, k(fmt.Sprintf("conc_%d_%d", g, i)))
			}
			m, err := c.GetMulti(keys)
			if err != nil {
				return errf("GetMulti of goroutine %d's keys: %v", g, err)
			}
			if len(m) != 2000 {
				return errf("GetMulti of goroutine %d's keys: %d items, want 2000", g, len(m))
			}
		}
		return nil
	})

	check("expiry_touch_gat_after_2.1s", func() error {
		if d := 2100*time.Millisecond - time.Since(ttlSet); d > 0 {
			time.Sleep(d)
		}
		if _, err := c.Get(k("exp")); !errors.Is(err, memcache.ErrCacheMiss) {
			return errf("Get of key set with TTL 1 s, 2.1 s later: %v, want cache miss", err)
		}
		for _, n := range []string{"ctr_ttl", "ap_ttl"} {
			if _, err := c.Get(k(n)); !errors.Is(err, memcache.ErrCacheMiss) {
				return errf("Get of %s (TTL 1 s, then incr/append), 2.1 s later: %v, want cache miss", n, err)
			}
		}
		if err := wantValue(c, k("touch"), []byte("ttl-touch")); err != nil {
			return errf("key touched to 100 s: %v", err)
		}
		if err := wantValue(c, k("gat"), []byte("ttl-gat")); err != nil {
			return errf("key get-and-touched to 100 s: %v", err)
		}
		return nil
	})

	check("flush_all", func() error {
		if err := c.FlushAll(); err != nil {
			return errf("FlushAll: %v", err)
		}
		for _, n := range []string{"s", "bin", "big", "touch", "multi_0"} {
			if _, err := c.Get(k(n)); !errors.Is(err, memcache.ErrCacheMiss) {
				return errf("Get %s after FlushAll: %v, want cache miss", n, err)
			}
		}
		if err := c.Set(&memcache.Item{Key: k("after_flush"), Value: []byte("y")}); err != nil {
			return errf("Set after FlushAll: %v", err)
		}
		if err := wantValue(c, k("after_flush"), []byte("y")); err != nil {
			return err
		}
		if err := c.DeleteAll(); err != nil {
			return errf("DeleteAll: %v", err)
		}
		_, err := c.Get(k("after_flush"))
		return wantErr("Get after DeleteAll", err, memcache.ErrCacheMiss)
	})

	if len(failures) > 0 {
		fmt.Println("--- failed checks:")
		for _, f := range failures {
			fmt.Println(f)
		}
	}
	fmt.Printf("gomemcache: %d passed, %d failed\n", passed, failed)
	if failed > 0 {
		os.Exit(1)
	}
}
