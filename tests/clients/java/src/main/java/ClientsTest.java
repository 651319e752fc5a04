// spymemcached 2.12.3 and xmemcached 2.4.8 against one memcached-compatible
// server, each on its text (ascii) and its binary protocol: four "modes",
// run one after the other with the same checks.
//
//   java -cp <spymemcached+xmemcached+slf4j> ClientsTest.java 127.0.0.1 11211 [mode...]
//
// modes: spy-ascii spy-binary xmem-text xmem-binary (default: all four).
// Prints one "PASS mode/check" or "FAIL mode/check: why" line per check
// ("SKIP" where the client itself lacks the call on that protocol) and ends
// with "java: N passed, M failed, K skipped"; exits 1 if any check failed.
// Run by tests/clients/java_clients.sh. Every expectation was validated
// against memcached 1.6.18.

import java.io.Serializable;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.logging.Level;
import java.util.logging.Logger;

public class ClientsTest {

    // ------------------------------------------------------------ plumbing --

    static int passed, failed, skipped;
    static final List<String> failures = new ArrayList<>();

    static final class CheckFailed extends RuntimeException {
        CheckFailed(String msg) { super(msg); }
    }

    static final class Skip extends RuntimeException {
        Skip(String msg) { super(msg); }
    }

    interface Body { void run() throws Exception; }

    static void check(String mode, String name, Body body) {
        long t0 = System.nanoTime();
        try {
            body.run();
            passed++;
            System.out.printf("PASS %s/%s (%d ms)%n", mode, name, (System.nanoTime() - t0) / 1_000_000);
        } catch (Skip s) {
            skipped++;
            System.out.printf("SKIP %s/%s: %s%n", mode, name, s.getMessage());
        } catch (CheckFailed f) {
            failed++;
            failures.add(String.format("FAIL %s/%s: %s", mode, name, f.getMessage()));
            System.out.println(failures.get(failures.size() - 1));
        } catch (Throwable t) {
            failed++;
            failures.add(String.format("FAIL %s/%s: unexpected %s", mode, name, t));
            System.out.println(failures.get(failures.size() - 1));
            t.printStackTrace(System.out);
        }
        System.out.flush();
    }

    static void ok(boolean cond, String fmt, Object... args) {
        if (!cond) throw new CheckFailed(String.format(fmt, args));
    }

    static void eq(Object got, Object want, String what) {
        boolean same = (got instanceof byte[] && want instanceof byte[])
                ? Arrays.equals((byte[]) got, (byte[]) want)
                : (got == null ? want == null : got.equals(want));
        if (!same) throw new CheckFailed(what + ": got " + show(got) + ", want " + show(want));
    }

    static String show(Object o) {
        if (o == null) return "null";
        if (o instanceof byte[]) {
            byte[] b = (byte[]) o;
            return "byte[" + b.length + "]" + Arrays.toString(Arrays.copyOf(b, Math.min(b.length, 16)));
        }
        String s = o.getClass().getSimpleName() + " " + o;
        return s.length() > 120 ? s.substring(0, 120) + "..." : s;
    }

    static byte[] randomBytes(int n, long seed) {
        byte[] b = new byte[n];
        new Random(seed).nextBytes(b); // incompressible: the transcoders send it as is
        return b;
    }

    /** A value with explicit memcached flags, for the flags transcoders. */
    static final class Flagged {
        final int flags;
        final byte[] data;
        Flagged(int flags, byte[] data) { this.flags = flags; this.data = data; }
    }

    static final class CasResult {
        final Object value;
        final long cas;
        CasResult(Object value, long cas) { this.value = value; this.cas = cas; }
    }

    enum CasOutcome { OK, EXISTS, NOT_FOUND }

    // ---------------------------------------------- the two clients, adapted --

    /** The calls the checks use, implemented by each client library. */
    interface Kv {
        boolean set(String k, int exp, Object v) throws Exception;
        Object get(String k) throws Exception;
        boolean add(String k, int exp, Object v) throws Exception;
        boolean replace(String k, int exp, Object v) throws Exception;
        boolean delete(String k) throws Exception;
        /** incr with a default (spymemcached) / initial value (xmemcached). */
        long incr(String k, long by, long dflt) throws Exception;
        long decr(String k, long by, long dflt) throws Exception;
        /** incr that creates the counter (dflt) with an expiry when missing. */
        long incrExp(String k, long by, long dflt, int exp) throws Exception;
        CasResult gets(String k) throws Exception;
        CasOutcome cas(String k, long cas, Object v) throws Exception;
        boolean append(String k, String v) throws Exception;
        boolean prepend(String k, String v) throws Exception;
        boolean touch(String k, int exp) throws Exception;
        /** throws Skip if the client has no get-and-touch on this protocol. */
        Object getAndTouch(String k, int exp) throws Exception;
        Map<String, Object> getMulti(Collection<String> keys) throws Exception;
        boolean setFlagged(String k, Flagged v) throws Exception;
        Flagged getFlagged(String k) throws Exception;
        /** store through a transcoder whose size limit is 4 MB, so the server decides. */
        boolean setBig(String k, byte[] v) throws Exception;
        void flush() throws Exception;
        Map<String, String> stats() throws Exception;
        String version() throws Exception;
        void close() throws Exception;
        boolean binary();
        /** stats with an argument ("items", "slabs"). */
        Map<String, String> statsOf(String group) throws Exception;
        /** xmemcached's *WithNoReply calls (quiet opcodes on binary); Skip for spymemcached. */
        void noreplySequence(String p) throws Exception;
    }

    // spymemcached ------------------------------------------------------------

    static final class SpyFlagsTranscoder implements net.spy.memcached.transcoders.Transcoder<Object> {
        public boolean asyncDecode(net.spy.memcached.CachedData d) { return false; }
        public net.spy.memcached.CachedData encode(Object o) {
            Flagged f = (Flagged) o;
            return new net.spy.memcached.CachedData(f.flags, f.data, getMaxSize());
        }
        public Object decode(net.spy.memcached.CachedData d) { return new Flagged(d.getFlags(), d.getData()); }
        public int getMaxSize() { return net.spy.memcached.CachedData.MAX_SIZE; }
    }

    static final class Spy implements Kv {
        final net.spy.memcached.MemcachedClient c;
        final boolean binary;
        final SpyFlagsTranscoder flagsTc = new SpyFlagsTranscoder();
        final net.spy.memcached.transcoders.SerializingTranscoder bigTc =
                new net.spy.memcached.transcoders.SerializingTranscoder(4 << 20);

        Spy(String host, int port, boolean binary) throws Exception {
            this.binary = binary;
            net.spy.memcached.ConnectionFactory cf = new net.spy.memcached.ConnectionFactoryBuilder()
                    .setProtocol(binary ? net.spy.memcached.ConnectionFactoryBuilder.Protocol.BINARY
                                        : net.spy.memcached.ConnectionFactoryBuilder.Protocol.TEXT)
                    .setOpTimeout(10_000)
                    .build();
            c = new net.spy.memcached.MemcachedClient(cf, net.spy.memcached.AddrUtil.getAddresses(host + ":" + port));
        }

        public boolean set(String k, int exp, Object v) throws Exception { return c.set(k, exp, v).get(10, TimeUnit.SECONDS); }
        public Object get(String k) { return c.get(k); }
        public boolean add(String k, int exp, Object v) throws Exception { return c.add(k, exp, v).get(10, TimeUnit.SECONDS); }
        public boolean replace(String k, int exp, Object v) throws Exception { return c.replace(k, exp, v).get(10, TimeUnit.SECONDS); }
        public boolean delete(String k) throws Exception { return c.delete(k).get(10, TimeUnit.SECONDS); }
        public long incr(String k, long by, long dflt) { return c.incr(k, by, dflt); }
        public long decr(String k, long by, long dflt) { return c.decr(k, by, dflt); }
        public long incrExp(String k, long by, long dflt, int exp) { return c.incr(k, by, dflt, exp); }
        public CasResult gets(String k) {
            net.spy.memcached.CASValue<Object> v = c.gets(k);
            return v == null ? null : new CasResult(v.getValue(), v.getCas());
        }
        public CasOutcome cas(String k, long cas, Object v) {
            net.spy.memcached.CASResponse r = c.cas(k, cas, v);
            switch (r) {
                case OK: return CasOutcome.OK;
                case EXISTS: return CasOutcome.EXISTS;
                case NOT_FOUND: return CasOutcome.NOT_FOUND;
                default: throw new CheckFailed("cas answered " + r);
            }
        }
        public boolean append(String k, String v) throws Exception { return c.append(k, v).get(10, TimeUnit.SECONDS); }
        public boolean prepend(String k, String v) throws Exception { return c.prepend(k, v).get(10, TimeUnit.SECONDS); }
        public boolean touch(String k, int exp) throws Exception { return c.touch(k, exp).get(10, TimeUnit.SECONDS); }
        public Object getAndTouch(String k, int exp) {
            try {
                net.spy.memcached.CASValue<Object> v = c.getAndTouch(k, exp);
                return v == null ? null : v.getValue();
            } catch (UnsupportedOperationException e) {
                throw new Skip("spymemcached: " + e.getMessage());
            }
        }
        public Map<String, Object> getMulti(Collection<String> keys) { return c.getBulk(keys); }
        public boolean setFlagged(String k, Flagged v) throws Exception { return c.set(k, 0, v, flagsTc).get(10, TimeUnit.SECONDS); }
        public Flagged getFlagged(String k) { return (Flagged) c.get(k, flagsTc); }
        public boolean setBig(String k, byte[] v) throws Exception { return c.set(k, 0, v, bigTc).get(10, TimeUnit.SECONDS); }
        public void flush() throws Exception { ok(c.flush().get(10, TimeUnit.SECONDS), "flush() returned false"); }
        public Map<String, String> stats() {
            Map<java.net.SocketAddress, Map<String, String>> all = c.getStats();
            ok(all.size() == 1, "getStats() returned %d servers: %s", all.size(), all.keySet());
            return all.values().iterator().next();
        }
        public String version() {
            Map<java.net.SocketAddress, String> v = c.getVersions();
            ok(v.size() == 1, "getVersions() returned %s", v);
            return v.values().iterator().next();
        }
        public void close() { c.shutdown(5, TimeUnit.SECONDS); }
        public boolean binary() { return binary; }
        public Map<String, String> statsOf(String group) {
            Map<java.net.SocketAddress, Map<String, String>> all = c.getStats(group);
            ok(all.size() == 1, "getStats(%s) returned %d servers", group, all.size());
            return all.values().iterator().next();
        }
        public void noreplySequence(String p) { throw new Skip("spymemcached has no noreply calls"); }
    }

    // xmemcached --------------------------------------------------------------

    static final class XmFlagsTranscoder implements net.rubyeye.xmemcached.transcoders.Transcoder<Object> {
        public net.rubyeye.xmemcached.transcoders.CachedData encode(Object o) {
            Flagged f = (Flagged) o;
            return new net.rubyeye.xmemcached.transcoders.CachedData(f.flags, f.data);
        }
        public Object decode(net.rubyeye.xmemcached.transcoders.CachedData d) { return new Flagged(d.getFlag(), d.getData()); }
        public void setPrimitiveAsString(boolean b) {}
        public void setPackZeros(boolean b) {}
        public void setCompressionThreshold(int to) {}
        public boolean isPrimitiveAsString() { return false; }
        public boolean isPackZeros() { return false; }
        public void setCompressionMode(net.rubyeye.xmemcached.transcoders.CompressionMode m) {}
    }

    static final class Xm implements Kv {
        final net.rubyeye.xmemcached.MemcachedClient c;
        final boolean binary;
        final XmFlagsTranscoder flagsTc = new XmFlagsTranscoder();
        final net.rubyeye.xmemcached.transcoders.SerializingTranscoder bigTc =
                new net.rubyeye.xmemcached.transcoders.SerializingTranscoder(4 << 20);

        Xm(String host, int port, boolean binary) throws Exception {
            this.binary = binary;
            net.rubyeye.xmemcached.XMemcachedClientBuilder b = new net.rubyeye.xmemcached.XMemcachedClientBuilder(
                    net.rubyeye.xmemcached.utils.AddrUtil.getAddresses(host + ":" + port));
            if (binary) b.setCommandFactory(new net.rubyeye.xmemcached.command.BinaryCommandFactory());
            b.setOpTimeout(10_000);
            b.setConnectTimeout(10_000);
            c = b.build();
        }

        public boolean set(String k, int exp, Object v) throws Exception { return c.set(k, exp, v); }
        public Object get(String k) throws Exception { return c.get(k); }
        public boolean add(String k, int exp, Object v) throws Exception { return c.add(k, exp, v); }
        public boolean replace(String k, int exp, Object v) throws Exception { return c.replace(k, exp, v); }
        public boolean delete(String k) throws Exception { return c.delete(k); }
        public long incr(String k, long by, long dflt) throws Exception { return c.incr(k, by, dflt); }
        public long decr(String k, long by, long dflt) throws Exception { return c.decr(k, by, dflt); }
        public long incrExp(String k, long by, long dflt, int exp) throws Exception {
            return c.incr(k, by, dflt, 10_000, exp);
        }
        public CasResult gets(String k) throws Exception {
            net.rubyeye.xmemcached.GetsResponse<Object> r = c.gets(k);
            return r == null ? null : new CasResult(r.getValue(), r.getCas());
        }
        public CasOutcome cas(String k, long cas, Object v) throws Exception {
            // xmemcached's cas() only says true/false; tell EXISTS from NOT_FOUND with a get.
            if (c.cas(k, 0, v, cas)) return CasOutcome.OK;
            return c.get(k) == null ? CasOutcome.NOT_FOUND : CasOutcome.EXISTS;
        }
        public boolean append(String k, String v) throws Exception { return c.append(k, v); }
        public boolean prepend(String k, String v) throws Exception { return c.prepend(k, v); }
        public boolean touch(String k, int exp) throws Exception { return c.touch(k, exp); }
        public Object getAndTouch(String k, int exp) throws Exception {
            try {
                return c.getAndTouch(k, exp);
            } catch (UnsupportedOperationException e) {
                throw new Skip("xmemcached: " + e.getMessage());
            }
        }
        public Map<String, Object> getMulti(Collection<String> keys) throws Exception { return c.get(keys); }
        public boolean setFlagged(String k, Flagged v) throws Exception { return c.set(k, 0, v, flagsTc); }
        public Flagged getFlagged(String k) throws Exception { return (Flagged) c.get(k, flagsTc); }
        public boolean setBig(String k, byte[] v) throws Exception { return c.set(k, 0, v, bigTc); }
        public void flush() throws Exception { c.flushAll(); }
        public Map<String, String> stats() throws Exception {
            Map<InetSocketAddress, Map<String, String>> all = c.getStats();
            ok(all.size() == 1, "getStats() returned %d servers: %s", all.size(), all.keySet());
            return all.values().iterator().next();
        }
        public String version() throws Exception {
            Map<InetSocketAddress, String> v = c.getVersions();
            ok(v.size() == 1, "getVersions() returned %s", v);
            return v.values().iterator().next();
        }
        public void close() throws Exception { c.shutdown(); }
        public boolean binary() { return binary; }
        public Map<String, String> statsOf(String group) throws Exception {
            Map<InetSocketAddress, Map<String, String>> all = c.getStatsByItem(group);
            ok(all.size() == 1, "getStatsByItem(%s) returned %d servers", group, all.size());
            return all.values().iterator().next();
        }
        public void noreplySequence(String p) throws Exception {
            c.setWithNoReply(p + "nr_set", 0, "one");
            c.setWithNoReply(p + "nr_ctr", 0, "10");
            c.addWithNoReply(p + "nr_set", 0, "not stored");      // exists: ignored
            c.addWithNoReply(p + "nr_add", 0, "added");
            c.replaceWithNoReply(p + "nr_missing", 0, "x");       // missing: ignored
            c.appendWithNoReply(p + "nr_set", "-two");
            c.prependWithNoReply(p + "nr_set", "zero-");
            c.incrWithNoReply(p + "nr_ctr", 5);
            c.decrWithNoReply(p + "nr_ctr", 2);
            c.setWithNoReply(p + "nr_del", 0, "x");
            c.deleteWithNoReply(p + "nr_del");
            // a normal (replied) call afterwards sees every quiet one before it
            eq(c.get(p + "nr_set"), "zero-one-two", "get after set/add/append/prepend WithNoReply");
            eq(c.get(p + "nr_add"), "added", "get after addWithNoReply");
            eq(c.get(p + "nr_missing"), null, "get after replaceWithNoReply(missing)");
            Object ctr = c.get(p + "nr_ctr");
            eq(ctr == null ? null : ctr.toString().trim(), "13", "get after incr/decrWithNoReply");
            eq(c.get(p + "nr_del"), null, "get after deleteWithNoReply");
            eq(c.incr(p + "nr_ctr", 1, 0), 14L, "incr after the quiet calls");
        }
    }

    // ---------------------------------------------------------------- checks --

    static void runChecks(String mode, Kv kv) throws Exception {
        String p = mode.replace('-', '_') + "_" + (System.nanoTime() % 1_000_000) + "_";

        check(mode, "version", () -> {
            String v = kv.version();
            ok(v != null && !v.isEmpty(), "version is %s", v);
            System.out.println("  version: " + v);
        });

        check(mode, "stats", () -> {
            Map<String, String> s = kv.stats();
            ok(s.containsKey("pid"), "stats has no pid: %s", s.keySet());
            ok(s.containsKey("curr_items"), "stats has no curr_items: %s", s.keySet());
            Long.parseLong(s.get("pid"));
            Long.parseLong(s.get("curr_items"));
        });

        // keys with a 1 s TTL, checked after 3.1 s at the end of the mode;
        // those touched to 100 s are set with 2 s, so a second that ticks
        // between their set and their touch does not expire them first
        // (an item of TTL 1 expires at the next tick, in memcached too)
        long ttlSetAt = System.nanoTime();
        boolean[] gatSupported = {false};
        check(mode, "ttl_touch_setup", () -> {
            ok(kv.set(p + "exp", 1, "ttl-exp"), "set exp with ttl 1 returned false");
            for (String n : new String[] {"touch", "gat"}) {
                ok(kv.set(p + n, 2, "ttl-" + n), "set %s with ttl 2 returned false", n);
            }
            // incr and append keep the item's expiry
            ok(kv.set(p + "ctr_ttl", 1, "5"), "set counter with ttl 1 returned false");
            eq(kv.incr(p + "ctr_ttl", 1, 0), 6L, "incr of a counter with ttl 1");
            ok(kv.set(p + "ap_ttl", 1, "a"), "set with ttl 1 returned false");
            ok(kv.append(p + "ap_ttl", "b"), "append to a key with ttl 1 returned false");
            // a counter created by incr-with-default with an expiry of 1 s
            eq(kv.incrExp(p + "ctr_new_ttl", 1, 40, 1), 40L, "incr(missing, 1, default 40, exp 1)");
            eq(kv.incrExp(p + "ctr_new_ttl", 1, 40, 1), 41L, "incr(40, 1, default 40, exp 1)");
            ok(kv.touch(p + "touch", 100), "touch(key, 100) returned false");
            ok(!kv.touch(p + "nope", 100), "touch(missing key) returned true");
        });
        check(mode, "get_and_touch", () -> {
            Object v = kv.getAndTouch(p + "gat", 100);
            gatSupported[0] = true;
            eq(v, "ttl-gat", "getAndTouch(key, 100)");
            eq(kv.getAndTouch(p + "nope", 100), null, "getAndTouch(missing key)");
        });

        check(mode, "set_get_string", () -> {
            ok(kv.set(p + "s", 0, "hello world"), "set returned false");
            eq(kv.get(p + "s"), "hello world", "get");
            ok(kv.set(p + "s", 0, "second"), "set (overwrite) returned false");
            eq(kv.get(p + "s"), "second", "get after overwrite");
            String unicode = "Grüße, 世界 \r\nEND\r\n";
            ok(kv.set(p + "u", 0, unicode), "set unicode returned false");
            eq(kv.get(p + "u"), unicode, "get unicode");
        });

        check(mode, "binary_all_256_bytes", () -> {
            byte[] v = new byte[256];
            for (int i = 0; i < 256; i++) v[i] = (byte) i;
            ok(kv.set(p + "bin", 0, v), "set returned false");
            eq(kv.get(p + "bin"), v, "get byte[256]");
        });

        check(mode, "value_500k", () -> {
            byte[] v = randomBytes(500 * 1024, 1);
            ok(kv.set(p + "big", 0, v), "set of 500 KB returned false");
            eq(kv.get(p + "big"), v, "get of 500 KB");
        });

        check(mode, "get_missing", () -> eq(kv.get(p + "missing"), null, "get(missing key)"));

        check(mode, "add", () -> {
            ok(kv.add(p + "add", 0, "first"), "add(new key) returned false");
            ok(!kv.add(p + "add", 0, "second"), "add(existing key) returned true");
            eq(kv.get(p + "add"), "first", "get after failed add");
        });

        check(mode, "replace", () -> {
            ok(!kv.replace(p + "repl", 0, "x"), "replace(missing key) returned true");
            eq(kv.get(p + "repl"), null, "get after failed replace");
            ok(kv.set(p + "repl", 0, "a"), "set returned false");
            ok(kv.replace(p + "repl", 0, "b"), "replace(existing key) returned false");
            eq(kv.get(p + "repl"), "b", "get after replace");
        });

        check(mode, "delete", () -> {
            ok(kv.set(p + "del", 0, "x"), "set returned false");
            ok(kv.delete(p + "del"), "delete returned false");
            eq(kv.get(p + "del"), null, "get after delete");
            ok(!kv.delete(p + "del"), "delete(missing key) returned true");
        });

        check(mode, "incr_decr", () -> {
            String k = p + "ctr";
            eq(kv.incr(k, 5, 100), 100L, "incr(missing, 5, default 100)");
            eq(kv.incr(k, 5, 100), 105L, "incr(100, 5, 100)");
            eq(kv.decr(k, 3, 100), 102L, "decr(105, 3, 100)");
            eq(kv.decr(k, 1000, 100), 0L, "decr(102, 1000, 100): below 0 stays 0");
            eq(kv.incr(k, 7, 100), 7L, "incr(0, 7, 100)");
            String k2 = p + "ctr2";
            eq(kv.decr(k2, 3, 50), 50L, "decr(missing, 3, default 50)");
            ok(kv.set(p + "ctr3", 0, "18446744073709551615"), "set 2^64-1 returned false");
            eq(kv.incr(p + "ctr3", 1, 0), 0L, "incr(2^64-1, 1): wraps to 0");
            ok(kv.set(p + "ctr4", 0, "10"), "set \"10\" returned false");
            eq(kv.incr(p + "ctr4", 1, 0), 11L, "incr(\"10\", 1)");
            Object after = kv.get(p + "ctr4");
            eq(after == null ? null : after.toString().trim(), "11", "get after incr");
        });

        check(mode, "cas", () -> {
            String k = p + "cas";
            ok(kv.set(k, 0, "v1"), "set returned false");
            CasResult g = kv.gets(k);
            ok(g != null, "gets returned null");
            eq(g.value, "v1", "gets value");
            eq(kv.cas(k, g.cas, "v2"), CasOutcome.OK, "cas with the fresh token " + g.cas);
            eq(kv.cas(k, g.cas, "v3"), CasOutcome.EXISTS, "second cas with the stale token " + g.cas);
            eq(kv.get(k), "v2", "get after cas");
            CasResult g2 = kv.gets(k);
            ok(g2 != null && g2.cas != g.cas, "cas token did not change after a successful cas");
            ok(kv.delete(k), "delete returned false");
            eq(kv.cas(k, g2.cas, "v4"), CasOutcome.NOT_FOUND, "cas on a deleted key");
            eq(kv.gets(p + "missing"), null, "gets(missing key)");
        });

        check(mode, "append_prepend", () -> {
            String k = p + "ap";
            ok(!kv.append(k, "x"), "append(missing key) returned true");
            ok(!kv.prepend(k, "x"), "prepend(missing key) returned true");
            ok(kv.set(k, 0, "middle"), "set returned false");
            ok(kv.append(k, "-end"), "append returned false");
            ok(kv.prepend(k, "start-"), "prepend returned false");
            eq(kv.get(k), "start-middle-end", "get after append+prepend");
        });

        check(mode, "java_objects_flags", () -> {
            HashMap<String, Object> map = new HashMap<>();
            map.put("a", 1);
            map.put("b", Arrays.asList("x", "y"));
            map.put("c", 3L);
            Object[][] cases = {
                {"str", "a string"}, {"int", 123456789}, {"intneg", -42}, {"long", 1234567890123456789L},
                {"map", map}, {"bool", Boolean.TRUE}, {"double", 3.25d},
            };
            for (Object[] c : cases) {
                ok(kv.set(p + "obj_" + c[0], 0, c[1]), "set %s returned false", c[0]);
                Object got = kv.get(p + "obj_" + c[0]);
                eq(got, c[1], "get " + c[0] + " (decoded by its flags)");
            }
            byte[] bytes = {0, 1, 2, (byte) 0xff, 13, 10};
            ok(kv.set(p + "obj_bytes", 0, bytes), "set byte[] returned false");
            eq(kv.get(p + "obj_bytes"), bytes, "get byte[]");
        });

        check(mode, "raw_flags", () -> {
            // Both text clients print the Java int flags signed ("set k -559038737 ..."),
            // which memcached refuses (CLIENT_ERROR bad command line format) and which
            // then derails xmemcached's text connection: flags >= 2^31 only on binary.
            int[] flags = kv.binary() ? new int[] {0, 1, 0xABCD, 0x7FFFFFFF, 0x80000000, 0xDEADBEEF, 0xFFFFFFFF}
                                      : new int[] {0, 1, 0xABCD, 0x12345678, 0x7FFFFFFF};
            for (int f : flags) {
                String k = p + "flags_" + Integer.toHexString(f);
                byte[] d = ("flags " + f).getBytes();
                ok(kv.setFlagged(k, new Flagged(f, d)), "set with flags 0x%x returned false", f);
                Flagged got = kv.getFlagged(k);
                ok(got != null, "get with flags 0x%x missed", f);
                ok(got.flags == f, "flags 0x%x came back as 0x%x", f, got.flags);
                eq(got.data, d, "data with flags 0x" + Integer.toHexString(f));
            }
        });

        check(mode, "multi_get_100", () -> {
            List<String> keys = new ArrayList<>();
            for (int i = 0; i < 100; i++) {
                String k = p + "multi_" + i;
                keys.add(k);
                if (i % 5 == 4) continue; // every 5th key is a miss
                Object v = (i % 2 == 0) ? (Object) ("value-" + i) : (Object) Integer.valueOf(i);
                ok(kv.set(k, 0, v), "set %s returned false", k);
            }
            Map<String, Object> m = kv.getMulti(keys);
            ok(m.size() == 80, "multi-get returned %d values, want 80", m.size());
            for (int i = 0; i < 100; i++) {
                Object want = (i % 5 == 4) ? null : (i % 2 == 0) ? (Object) ("value-" + i) : (Object) Integer.valueOf(i);
                eq(m.get(keys.get(i)), want, "multi-get " + keys.get(i));
            }
        });

        check(mode, "key_length", () -> {
            StringBuilder sb = new StringBuilder(p);
            while (sb.length() < 250) sb.append('k');
            String k250 = sb.toString();
            ok(kv.set(k250, 0, "long key"), "set with a 250-byte key returned false");
            eq(kv.get(k250), "long key", "get with a 250-byte key");
            String k251 = k250 + "x";
            try {
                boolean r = kv.set(k251, 0, "x");
                ok(!r, "set with a 251-byte key returned true");
                System.out.println("  (251-byte key: not rejected by the client; set returned false)");
            } catch (CheckFailed f) {
                throw f;
            } catch (Exception e) {
                System.out.println("  (251-byte key rejected by the client: " + e + ")");
            }
            eq(kv.get(p + "s"), "second", "get after the 251-byte key");
        });

        check(mode, "value_too_large_2mb", () -> {
            String k = p + "huge";
            ok(kv.set(k, 0, "old"), "set old returned false");
            byte[] v = randomBytes(2 << 20, 2);
            // the default transcoder first (xmemcached refuses over 1 MB itself), then
            // a 4 MB-limit transcoder so that the server has to refuse it
            for (int attempt = 0; attempt < 2; attempt++) {
                String how = attempt == 0 ? "set(2 MB) default transcoder" : "set(2 MB) 4 MB-limit transcoder";
                try {
                    boolean r = attempt == 0 ? kv.set(k, 0, v) : kv.setBig(k, v);
                    ok(!r, "%s returned true", how);
                    System.out.println("  (" + how + ": returned false)");
                } catch (CheckFailed f) {
                    throw f;
                } catch (Exception e) {
                    System.out.println("  (" + how + ": " + e + ")");
                }
                eq(kv.get(p + "s"), "second", "get of another key after " + how);
            }
            // memcached drops the old value when a set is too large
            eq(kv.get(k), null, "get of the key after the too-large set");
            ok(kv.set(k, 0, "small"), "set after the failures returned false");
            eq(kv.get(k), "small", "get after the failures");
        });

        check(mode, "noreply", () -> kv.noreplySequence(p));

        check(mode, "incr_non_numeric", () -> {
            ok(kv.set(p + "nan", 0, "abc"), "set returned false");
            try {
                long r = kv.incr(p + "nan", 1, 0);
                System.out.println("  (incr of \"abc\": returned " + r + ")");
                ok(r == -1, "incr of a non-numeric value returned %d", r);
            } catch (CheckFailed f) {
                throw f;
            } catch (Exception e) {
                System.out.println("  (incr of \"abc\": " + e + ")");
            }
            eq(kv.get(p + "nan"), "abc", "get after the failed incr");
            eq(kv.get(p + "s"), "second", "get of another key after the failed incr");
        });

        check(mode, "special_keys", () -> {
            String utf8 = p + "ключ_キー_€";
            ok(kv.set(utf8, 0, "utf8 key"), "set with a UTF-8 key returned false");
            eq(kv.get(utf8), "utf8 key", "get with a UTF-8 key");
            Map<String, Object> m = kv.getMulti(Arrays.asList(utf8, p + "s"));
            eq(m.get(utf8), "utf8 key", "multi-get with a UTF-8 key");
            // whitespace/control bytes: the text clients refuse them, the binary
            // protocol carries any bytes and memcached stores them
            String odd = p + "sp ace\r\nnl\u0000nul\ttab";
            try {
                boolean r = kv.set(odd, 0, "odd key");
                ok(kv.binary(), "the text client sent a key with whitespace (set returned %s)", r);
                ok(r, "binary set with a key holding space/CR/LF/NUL/TAB returned false");
                eq(kv.get(odd), "odd key", "binary get with a key holding space/CR/LF/NUL/TAB");
                eq(kv.getMulti(Arrays.asList(odd, p + "s")).get(odd), "odd key", "binary multi-get of that key");
                ok(kv.delete(odd), "binary delete of that key returned false");
                eq(kv.get(odd), null, "get after delete of that key");
            } catch (IllegalArgumentException e) {
                ok(!kv.binary() || mode.startsWith("xmem"), "binary client refused the key: %s", e);
                System.out.println("  (key with whitespace rejected by the client: "
                        + e.getMessage().replace("\r", "\\r").replace("\n", "\\n").replace("\u0000", "\\0") + ")");
            }
            eq(kv.get(p + "s"), "second", "get of another key afterwards");
        });

        check(mode, "concurrent_8x2000", () -> {
            ExecutorService pool = Executors.newFixedThreadPool(8);
            try {
                List<Future<String>> fs = new ArrayList<>();
                for (int t = 0; t < 8; t++) {
                    final int tt = t;
                    fs.add(pool.submit(() -> {
                        for (int i = 0; i < 2000; i++) {
                            String k = p + "conc_" + tt + "_" + i;
                            String v = "t" + tt + "-i" + i + "-" + "v".repeat(i % 97);
                            if (!kv.set(k, 0, v)) return "set " + k + " returned false";
                            Object got = kv.get(k);
                            if (!v.equals(got)) return "get " + k + ": got " + show(got) + ", want " + show(v);
                        }
                        return null;
                    }));
                }
                for (Future<String> f : fs) {
                    String err = f.get(120, TimeUnit.SECONDS);
                    ok(err == null, "%s", err);
                }
            } finally {
                pool.shutdownNow();
            }
            // and read back one thread's keys in one multi-get
            List<String> keys = new ArrayList<>();
            for (int i = 0; i < 2000; i++) keys.add(p + "conc_3_" + i);
            Map<String, Object> m = kv.getMulti(keys);
            ok(m.size() == 2000, "multi-get of 2000 keys returned %d values", m.size());
        });

        check(mode, "expiry_touch_after_3.1s", () -> {
            long waitMs = 3100 - (System.nanoTime() - ttlSetAt) / 1_000_000;
            if (waitMs > 0) Thread.sleep(waitMs);
            eq(kv.get(p + "exp"), null, "get of a key set with TTL 1 s, 3.1 s later");
            eq(kv.get(p + "ctr_ttl"), null, "get of a counter set with TTL 1 s and incremented, 3.1 s later");
            eq(kv.get(p + "ap_ttl"), null, "get of a key set with TTL 1 s and appended to, 3.1 s later");
            eq(kv.get(p + "ctr_new_ttl"), null, "get of a counter created by incr with exp 1, 3.1 s later");
            eq(kv.get(p + "touch"), "ttl-touch", "get of a key touched to 100 s");
            if (gatSupported[0]) eq(kv.get(p + "gat"), "ttl-gat", "get of a key get-and-touched to 100 s");
        });

        check(mode, "stats_after_writes", () -> {
            Map<String, String> s = kv.stats();
            long items = Long.parseLong(s.get("curr_items"));
            ok(items >= 16000, "curr_items %d, want >= 16000 after the concurrent writes", items);
        });

        check(mode, "stats_items_slabs", () -> {
            Map<String, String> items = kv.statsOf("items");
            ok(items.keySet().stream().anyMatch(x -> x.matches("items:\\d+:number")),
               "stats items has no items:N:number: %s", items.keySet());
            long n = items.entrySet().stream().filter(e -> e.getKey().matches("items:\\d+:number"))
                    .mapToLong(e -> Long.parseLong(e.getValue())).sum();
            ok(n >= 16000, "stats items: the items:N:number add up to %d, want >= 16000", n);
            Map<String, String> slabs = kv.statsOf("slabs");
            ok(slabs.containsKey("active_slabs"), "stats slabs has no active_slabs: %s", slabs.keySet());
            ok(slabs.keySet().stream().anyMatch(x -> x.matches("\\d+:chunk_size")),
               "stats slabs has no N:chunk_size: %s", slabs.keySet());
        });

        check(mode, "flush_all", () -> {
            kv.flush();
            for (String n : new String[] {"s", "bin", "big", "touch", "multi_0", "conc_0_0"}) {
                eq(kv.get(p + n), null, "get " + n + " after flush");
            }
            ok(kv.set(p + "after_flush", 0, "y"), "set after flush returned false");
            eq(kv.get(p + "after_flush"), "y", "get after flush");
        });
    }

    public static void main(String[] args) throws Exception {
        // spymemcached logs through java.util.logging; keep warnings and errors only
        System.setProperty("net.spy.log.LoggerImpl", "net.spy.memcached.compat.log.SunLogger");
        Logger.getLogger("").setLevel(Level.WARNING);
        Logger.getLogger("net.spy.memcached").setLevel(Level.WARNING);

        if (args.length < 2) {
            System.err.println("usage: ClientsTest HOST PORT [spy-ascii|spy-binary|xmem-text|xmem-binary ...]");
            System.exit(2);
        }
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        List<String> modes = args.length > 2 ? Arrays.asList(args).subList(2, args.length)
                : Arrays.asList("spy-ascii", "spy-binary", "xmem-text", "xmem-binary");
        for (String mode : modes) {
            long t0 = System.nanoTime();
            System.out.println("=== " + mode + " against " + host + ":" + port);
            Kv kv;
            try {
                switch (mode) {
                    case "spy-ascii": kv = new Spy(host, port, false); break;
                    case "spy-binary": kv = new Spy(host, port, true); break;
                    case "xmem-text": kv = new Xm(host, port, false); break;
                    case "xmem-binary": kv = new Xm(host, port, true); break;
                    default: throw new IllegalArgumentException("unknown mode " + mode);
                }
            } catch (Exception e) {
                failed++;
                failures.add("FAIL " + mode + "/connect: " + e);
                System.out.println(failures.get(failures.size() - 1));
                continue;
            }
            try {
                runChecks(mode, kv);
            } finally {
                try { kv.close(); } catch (Exception e) { System.out.println("  (close: " + e + ")"); }
            }
            System.out.printf("=== %s done in %d ms%n", mode, (System.nanoTime() - t0) / 1_000_000);
        }
        if (!failures.isEmpty()) {
            System.out.println("--- failed checks:");
            for (String f : failures) System.out.println(f);
        }
        System.out.printf("java: %d passed, %d failed, %d skipped%n", passed, failed, skipped);
        System.out.flush();
        // client I/O threads may linger: exit explicitly
        System.exit(failed > 0 ? 1 : 0);
    }
}
