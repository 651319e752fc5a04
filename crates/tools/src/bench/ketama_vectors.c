/*
 * ketama_vectors.c - reference vectors for ketama.rs, produced by the real
 * libmemcached (Debian bookworm: libmemcached11 / libmemcached-dev 1.1.4-1,
 * "libmemcached-awesome").
 *
 * Build and run in crates/tools/src/bench/ (needs `apt-get install libmemcached-dev`):
 *
 *     cc ketama_vectors.c -lmemcached -o gen && ./gen > ketama_vectors.txt
 *
 * It only computes key -> server mappings: memcached_server_add() stores the
 * host string and port, memcached_behavior_set() rebuilds the continuum,
 * memcached_generate_hash() / memcached_server_by_key() look a key up.  None of
 * these open a socket or resolve a name, so the 10.x servers below are never
 * contacted (checked with `strace -f -e trace=network ./gen`: no socket calls).
 *
 * Output: one line per case,
 *     mode=<mode> servers=<host:port,...> key=<key> server=<index>
 * or  mode=<mode> servers=<host:port,...> keyhex=<hex bytes> server=<index>
 * for keys that are empty or not all printable ASCII (0x21..0x7e).
 * <index> is the 0-based position in the servers list (the order in which
 * they were added; MEMCACHED_BEHAVIOR_SORT_HOSTS is left off).
 */
#include <libmemcached/memcached.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mode {
  const char *name;
  const char *desc;
  void (*setup)(memcached_st *);
};

static void check(memcached_st *m, memcached_return_t rc, const char *what) {
  if (rc != MEMCACHED_SUCCESS) {
    fprintf(stderr, "%s: %s\n", what, memcached_last_error_message(m));
    exit(1);
  }
}

static void setup_consistent(memcached_st *m) {
  check(m,
        memcached_behavior_set(m, MEMCACHED_BEHAVIOR_DISTRIBUTION,
                               MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA),
        "DISTRIBUTION");
}

static void setup_behavior_ketama(memcached_st *m) {
  check(m, memcached_behavior_set(m, MEMCACHED_BEHAVIOR_KETAMA, 1), "KETAMA");
}

static void setup_consistent_md5(memcached_st *m) {
  setup_consistent(m);
  check(m, memcached_behavior_set(m, MEMCACHED_BEHAVIOR_HASH, MEMCACHED_HASH_MD5), "HASH");
}

static void setup_ketama_weighted(memcached_st *m) {
  check(m, memcached_behavior_set(m, MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED, 1), "KETAMA_WEIGHTED");
}

/* Not a mode of ketama.rs: only used to show that KETAMA_HASH has no effect. */
static void setup_consistent_ketama_hash_md5(memcached_st *m) {
  setup_consistent(m);
  check(m, memcached_behavior_set(m, MEMCACHED_BEHAVIOR_KETAMA_HASH, MEMCACHED_HASH_MD5),
        "KETAMA_HASH");
}

static const struct mode MODES[] = {
    {"consistent",
     "memcached_behavior_set(DISTRIBUTION, MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA); "
     "default HASH (one-at-a-time); KETAMA_WEIGHTED off",
     setup_consistent},
    {"behavior_ketama",
     "memcached_behavior_set(MEMCACHED_BEHAVIOR_KETAMA, 1) (in 1.1.4 this only sets "
     "DISTRIBUTION=CONSISTENT_KETAMA, the hash stays one-at-a-time)",
     setup_behavior_ketama},
    {"consistent_md5",
     "DISTRIBUTION=CONSISTENT_KETAMA plus memcached_behavior_set(HASH, MEMCACHED_HASH_MD5)",
     setup_consistent_md5},
    {"ketama_weighted",
     "memcached_behavior_set(MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED, 1) (libketama-compatible: "
     "sets HASH=MD5, KETAMA_HASH=MD5, DISTRIBUTION=CONSISTENT_WEIGHTED)",
     setup_ketama_weighted},
};
#define NMODES (sizeof(MODES) / sizeof(MODES[0]))

#define MAX_SERVERS 32
struct server_set {
  int n;
  char host[MAX_SERVERS][64];
  unsigned port[MAX_SERVERS];
  char joined[MAX_SERVERS * 72];
};

static void set_add(struct server_set *s, const char *host, unsigned port) {
  snprintf(s->host[s->n], sizeof s->host[s->n], "%s", host);
  s->port[s->n] = port;
  s->n++;
  s->joined[0] = 0;
  for (int i = 0; i < s->n; i++) {
    char buf[80];
    snprintf(buf, sizeof buf, "%s%s:%u", i ? "," : "", s->host[i], s->port[i]);
    strcat(s->joined, buf);
  }
}

static memcached_st *make(const struct mode *mode, const struct server_set *s) {
  memcached_st *m = memcached_create(NULL);
  if (!m) {
    fprintf(stderr, "memcached_create failed\n");
    exit(1);
  }
  mode->setup(m);
  for (int i = 0; i < s->n; i++) {
    check(m, memcached_server_add(m, s->host[i], (in_port_t) s->port[i]), "server_add");
  }
  if ((int) memcached_server_count(m) != s->n) {
    fprintf(stderr, "server count mismatch\n");
    exit(1);
  }
  return m;
}

static int printable(const char *k, size_t len) {
  if (len == 0) return 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char) k[i];
    if (c < 0x21 || c > 0x7e) return 0;
  }
  return 1;
}

static uint32_t lookup(memcached_st *m, const struct server_set *s, const char *k, size_t len) {
  uint32_t idx = memcached_generate_hash(m, k, len);
  if ((int) idx >= s->n) {
    fprintf(stderr, "index out of range\n");
    exit(1);
  }
  /* Cross-check with memcached_server_by_key (it rejects the empty key). */
  if (len > 0) {
    /* memcached_server_by_key() only writes rc on failure. */
    memcached_return_t rc = MEMCACHED_SUCCESS;
    const memcached_instance_st *inst = memcached_server_by_key(m, k, len, &rc);
    if (!inst || rc != MEMCACHED_SUCCESS) {
      fprintf(stderr, "memcached_server_by_key failed for %.*s: %s / %s\n", (int) len, k, memcached_strerror(m, rc), memcached_last_error_message(m));
      exit(1);
    }
    if (strcmp(memcached_server_name(inst), s->host[idx]) != 0
        || memcached_server_port(inst) != s->port[idx]) {
      fprintf(stderr, "generate_hash and server_by_key disagree\n");
      exit(1);
    }
  }
  return idx;
}

static void emit(const struct mode *mode, memcached_st *m, const struct server_set *s,
                 const char *k, size_t len) {
  uint32_t idx = lookup(m, s, k, len);
  printf("mode=%s servers=%s ", mode->name, s->joined);
  if (printable(k, len)) {
    printf("key=%.*s", (int) len, k);
  } else {
    printf("keyhex=");
    for (size_t i = 0; i < len; i++) printf("%02x", (unsigned char) k[i]);
  }
  printf(" server=%u\n", idx);
}

/* Odd keys: single char, empty, maximum length, bytes >= 0x80 (one-at-a-time
 * reads them as signed char), punctuation. */
static char long_key[251];
static const char *odd_keys[] = {
    "a", "", long_key, "\xc3\xa9t\xc3\xa9", "\xff", "\x80" "abc", "\x7f\x01\x02",
    "foo/bar?baz=1&x=%20", "KEY:0", "user:12345:profile", "~!@#$%^&*()_+", "0",
};
#define NODD (sizeof(odd_keys) / sizeof(odd_keys[0]))

static void run(const struct mode *mode, const struct server_set *s, int nkeys) {
  memcached_st *m = make(mode, s);
  char key[96];
  for (int i = 0; i < nkeys; i++) {
    int len = snprintf(key, sizeof key, "key:%d", i);
    emit(mode, m, s, key, (size_t) len);
  }
  for (size_t i = 0; i < NODD; i++) emit(mode, m, s, odd_keys[i], strlen(odd_keys[i]));
  /* Keys equal to the strings the continuum points are hashed from: their hash
   * equals a point's value exactly (the first point of a digest in
   * ketama_weighted), which pins down "first point >= hash". */
  static const unsigned point_ids[] = {0, 13, 39};
  for (int h = 0; h < s->n && h < 4; h++) {
    for (size_t i = 0; i < sizeof(point_ids) / sizeof(point_ids[0]); i++) {
      int len = s->port[h] == MEMCACHED_DEFAULT_PORT
          ? snprintf(key, sizeof key, "%s-%u", s->host[h], point_ids[i])
          : snprintf(key, sizeof key, "%s:%u-%u", s->host[h], s->port[h], point_ids[i]);
      emit(mode, m, s, key, (size_t) len);
    }
  }
  memcached_free(m);
}

/* How many of key:0..key:999 change when `b` is used instead of `a`. */
static int differences(const struct mode *a, const struct mode *b, const struct server_set *s) {
  memcached_st *ma = make(a, s), *mb = make(b, s);
  int diff = 0;
  char key[32];
  for (int i = 0; i < 1000; i++) {
    int len = snprintf(key, sizeof key, "key:%d", i);
    diff += memcached_generate_hash(ma, key, (size_t) len)
            != memcached_generate_hash(mb, key, (size_t) len);
  }
  memcached_free(ma);
  memcached_free(mb);
  return diff;
}

int main(void) {
  for (int i = 0; i < 250; i++) long_key[i] = (char) ('a' + (i * 7) % 26);
  long_key[250] = 0;

  struct server_set local = {0}, remote = {0}, single = {0}, mixed = {0}, dup = {0};
  set_add(&local, "127.0.0.1", 11211);
  set_add(&local, "127.0.0.1", 11212);
  set_add(&local, "127.0.0.1", 11213);
  for (int i = 1; i <= 4; i++) {
    char h[32];
    snprintf(h, sizeof h, "10.0.1.%d", i);
    set_add(&remote, h, 11211);
  }
  set_add(&single, "127.0.0.1", 11211);
  set_add(&mixed, "localhost", 11211);
  set_add(&mixed, "127.0.0.1", 11211);
  set_add(&mixed, "127.0.0.2", 11300);
  set_add(&mixed, "127.0.0.1", 1);
  /* A server listed twice: all its points tie, and ties go to the lower index
   * (continuum sorted by value, then index), so index 2 never comes up. */
  set_add(&dup, "127.0.0.1", 11211);
  set_add(&dup, "127.0.0.1", 11212);
  set_add(&dup, "127.0.0.1", 11211);

  printf("# ketama reference vectors for crates/tools/src/bench/ketama.rs\n");
  printf("# generated by ketama_vectors.c against libmemcached %s (Debian bookworm "
         "libmemcached11 1.1.4-1)\n",
         memcached_lib_version());
  printf("# format: mode=<mode> servers=<host:port,...> key=<key> server=<index>\n");
  printf("#   keyhex=<hex> replaces key= when the key is empty or has bytes outside 0x21..0x7e\n");
  printf("#   <index>: 0-based position in servers (add order; SORT_HOSTS off)\n");
  printf("#   lookup: memcached_generate_hash(), cross-checked with memcached_server_by_key()\n");
  printf("# cases: keys key:0..key:999 (key:0..key:99 for behavior_ketama and consistent_md5), odd\n"
         "#   keys (single char, empty, 250 bytes, bytes >= 0x80, punctuation), keys equal to the\n"
         "#   strings continuum points are hashed from; server sets: 3 local ports, 4 hosts on the\n"
         "#   default port, 1 server, host names and odd ports, a duplicated server, 5 and 25\n"
         "#   servers (25 gives 156 instead of 160 points per server in ketama_weighted)\n");
  printf("# modes (each on a fresh memcached_create(NULL), behaviour set before "
         "memcached_server_add(host, port)):\n");
  for (size_t i = 0; i < NMODES; i++) printf("#   %s: %s\n", MODES[i].name, MODES[i].desc);
  struct mode kh = {"consistent+KETAMA_HASH=MD5", "", setup_consistent_ketama_hash_md5};
  printf("# facts measured on this build (key:0..key:999, servers 127.0.0.1:11211..11213):\n");
  printf("#   behavior_ketama vs consistent: %d of 1000 keys differ\n",
         differences(&MODES[0], &MODES[1], &local));
  printf("#   consistent + KETAMA_HASH=MD5 vs consistent: %d of 1000 keys differ\n",
         differences(&MODES[0], &kh, &local));
  printf("#   consistent_md5 vs consistent: %d of 1000 keys differ\n",
         differences(&MODES[0], &MODES[2], &local));

  for (size_t i = 0; i < NMODES; i++) {
    int full = (i == 0 || i == 3); /* consistent and ketama_weighted get all keys */
    run(&MODES[i], &local, full ? 1000 : 100);
    run(&MODES[i], &remote, full ? 1000 : 100);
    run(&MODES[i], &single, 8);
    run(&MODES[i], &mixed, 100);
    run(&MODES[i], &dup, 50);
  }

  /* ketama_weighted computes points per server in float arithmetic:
   * floor(1/n * 160 / 4 * n + 1e-10) * 4, which is 156 (not 160) for some n
   * (n = 25 on x86-64).  Sweep the server count. */
  struct server_set sweep = {0};
  for (int n = 1; n <= 25; n++) {
    char h[32];
    snprintf(h, sizeof h, "10.0.2.%d", n);
    set_add(&sweep, h, 11211);
    if (n == 5 || n == 25) {
      run(&MODES[3], &sweep, 50);
      run(&MODES[0], &sweep, 10);
    }
  }
  return 0;
}
