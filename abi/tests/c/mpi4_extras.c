/* rankwire-test: ranks=1,3 */
/* The MPI 4.x functions mpi4py's suite calls: MPI_Comm_create_group and
 * MPI_Comm_create_from_group (collective over the group only), the split types
 * HW_GUIDED / HW_UNGUIDED / RESOURCE_GUIDED mixed with MPI_UNDEFINED, communicator
 * buffers for buffered sends (attach, flush, iflush, detach, MPI_BUFFER_AUTOMATIC),
 * MPI_Request_get_status{,_all,_any,_some} (the real source and tag, non-destructive),
 * generalized requests, user error classes above MPI_ERR_LASTCODE with empty strings,
 * MPI_Info_create_env, persistent neighborhood collectives, MPI_Sendrecv_replace of
 * zero elements, and the names of the null handles. Each rank checks its results. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks = 0, fails = 0, rank = 0, size = 0;
#define CHECK(c, ...)                                                          \
    do {                                                                       \
        checks++;                                                              \
        if (!(c)) {                                                            \
            fails++;                                                           \
            fprintf(stderr, "mpi4_extras rank %d line %d: ", rank, __LINE__);  \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
        }                                                                      \
    } while (0)
#define OK(call) CHECK((call) == MPI_SUCCESS, "%s failed", #call)

static int queried = 0, freed = 0, cancelled = 0;
static int q_fn(void *extra, MPI_Status *st) {
    queried++;
    MPI_Status_set_source(st, *(int *)extra);
    MPI_Status_set_tag(st, 77);
    MPI_Status_set_cancelled(st, 0);
    MPI_Status_set_elements(st, MPI_BYTE, 5);
    return MPI_SUCCESS;
}
static int f_fn(void *extra) { (void)extra; freed++; return MPI_SUCCESS; }
static int c_fn(void *extra, int complete) { (void)extra; cancelled = 1 + complete; return MPI_SUCCESS; }

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    int p = size, r = rank;

    /* create_group over the even ranks only (odd ranks do not call it), in
     * reverse order; then over everyone with another tag. */
    {
        MPI_Group world, evens;
        OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
        int n = (p + 1) / 2, *ranks = malloc(sizeof(int) * n);
        for (int i = 0; i < n; i++) ranks[i] = 2 * (n - 1 - i);
        OK(MPI_Group_incl(world, n, ranks, &evens));
        if (r % 2 == 0) {
            MPI_Comm c = MPI_COMM_NULL;
            OK(MPI_Comm_create_group(MPI_COMM_WORLD, evens, 5, &c));
            CHECK(c != MPI_COMM_NULL, "create_group gave MPI_COMM_NULL to a member");
            int cs = -1, cr = -1;
            OK(MPI_Comm_size(c, &cs));
            OK(MPI_Comm_rank(c, &cr));
            CHECK(cs == n && cr == n - 1 - r / 2, "create_group size %d rank %d", cs, cr);
            int v = r, sum = -1;
            OK(MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, c));
            CHECK(sum == (n - 1) * n, "allreduce on the group: %d", sum);
            OK(MPI_Comm_free(&c));
        }
        MPI_Comm all = MPI_COMM_NULL, fg = MPI_COMM_NULL;
        OK(MPI_Comm_create_group(MPI_COMM_WORLD, world, 6, &all));
        int res = -1;
        OK(MPI_Comm_compare(all, MPI_COMM_WORLD, &res));
        CHECK(res == MPI_CONGRUENT, "create_group of the world group: compare %d", res);
        OK(MPI_Comm_create_from_group(world, "org.rankwire.test", MPI_INFO_NULL,
                                      MPI_ERRORS_RETURN, &fg));
        OK(MPI_Comm_compare(fg, MPI_COMM_WORLD, &res));
        CHECK(res == MPI_CONGRUENT, "create_from_group: compare %d", res);
        MPI_Errhandler eh;
        OK(MPI_Comm_get_errhandler(fg, &eh));
        CHECK(eh == MPI_ERRORS_RETURN, "create_from_group errhandler");
        OK(MPI_Comm_free(&all));
        OK(MPI_Comm_free(&fg));
        OK(MPI_Group_free(&evens));
        OK(MPI_Group_free(&world));
        free(ranks);
    }

    /* Split types: only rank 0 asks, the others pass MPI_UNDEFINED. */
    {
        MPI_Info info;
        OK(MPI_Info_create(&info));
        OK(MPI_Info_set(info, "mpi_hw_resource_type", "mpi_shared_memory"));
        for (int root = 0; root < p; root++) {
            MPI_Comm c = MPI_COMM_NULL;
            int t = r == root ? MPI_COMM_TYPE_HW_GUIDED : MPI_UNDEFINED;
            OK(MPI_Comm_split_type(MPI_COMM_WORLD, t, 0, info, &c));
            if (r == root) {
                int cs = -1;
                CHECK(c != MPI_COMM_NULL, "hw_guided shared memory gave MPI_COMM_NULL");
                if (c != MPI_COMM_NULL) {
                    OK(MPI_Comm_size(c, &cs));
                    CHECK(cs == 1, "hw_guided alone: size %d", cs);
                    OK(MPI_Comm_free(&c));
                }
            } else {
                CHECK(c == MPI_COMM_NULL, "MPI_UNDEFINED got a communicator");
            }
        }
        MPI_Comm c = MPI_COMM_NULL;
        OK(MPI_Info_set(info, "mpi_hw_resource_type", "no-such-resource"));
        OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_RESOURCE_GUIDED, 0, info, &c));
        CHECK(c == MPI_COMM_NULL, "unknown resource type gave a communicator");
        /* One node: no strictly smaller hardware subset. */
        OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_UNGUIDED, 0, MPI_INFO_NULL, &c));
        CHECK(c == MPI_COMM_NULL, "hw_unguided on one node gave a communicator");
        /* Shared, ordered by key (reversed). */
        OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, p - r, MPI_INFO_NULL, &c));
        int cr = -1;
        OK(MPI_Comm_rank(c, &cr));
        CHECK(cr == p - 1 - r, "shared split by key: rank %d", cr);
        OK(MPI_Comm_free(&c));
        OK(MPI_Info_free(&info));
    }

    /* Communicator buffer: a buffered send to self on a dup, flushed. */
    {
        MPI_Comm d;
        OK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
        int bsz = 64 + MPI_BSEND_OVERHEAD;
        char *buf = malloc(bsz);
        OK(MPI_Comm_attach_buffer(d, buf, bsz));
        int v = 42 + r, got = 0;
        OK(MPI_Bsend(&v, 1, MPI_INT, r, 1, d));
        OK(MPI_Comm_flush_buffer(d));
        OK(MPI_Recv(&got, 1, MPI_INT, r, 1, d, MPI_STATUS_IGNORE));
        CHECK(got == 42 + r, "bsend on the comm buffer: %d", got);
        /* Too big for the communicator's buffer: an error, not a hang. */
        OK(MPI_Comm_set_errhandler(d, MPI_ERRORS_RETURN));
        char big[256] = {0};
        CHECK(MPI_Bsend(big, 256, MPI_CHAR, r, 2, d) != MPI_SUCCESS, "oversized bsend accepted");
        MPI_Request q;
        OK(MPI_Comm_iflush_buffer(d, &q));
        OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        void *back = NULL;
        int bn = 0;
        OK(MPI_Comm_detach_buffer(d, &back, &bn));
        CHECK(back == buf && bn == bsz, "detach gave %p %d", back, bn);
        OK(MPI_Comm_attach_buffer(d, MPI_BUFFER_AUTOMATIC, 0));
        OK(MPI_Bsend(big, 256, MPI_CHAR, r, 3, d));
        OK(MPI_Recv(big, 256, MPI_CHAR, r, 3, d, MPI_STATUS_IGNORE));
        OK(MPI_Comm_detach_buffer(d, &back, &bn));
        CHECK(back == MPI_BUFFER_AUTOMATIC, "automatic buffer detached as %p", back);
        OK(MPI_Buffer_flush());
        OK(MPI_Comm_free(&d));
        free(buf);
    }

    /* Request_get_status: the real status, and the request stays. */
    {
        int to = (r + 1) % p, from = (r + p - 1) % p;
        int out = r, in = -1, flag = 0;
        MPI_Request rq[2];
        OK(MPI_Irecv(&in, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &rq[0]));
        OK(MPI_Isend(&out, 1, MPI_INT, to, 9, MPI_COMM_WORLD, &rq[1]));
        MPI_Status st;
        while (!flag) OK(MPI_Request_get_status_all(2, rq, &flag, MPI_STATUSES_IGNORE));
        OK(MPI_Request_get_status(rq[0], &flag, &st));
        CHECK(flag && st.MPI_SOURCE == from && st.MPI_TAG == 9, "get_status %d %d %d", flag,
              st.MPI_SOURCE, st.MPI_TAG);
        int idx = -1;
        OK(MPI_Request_get_status_any(2, rq, &idx, &flag, &st));
        CHECK(flag && (idx == 0 || idx == 1), "get_status_any %d %d", flag, idx);
        int outc = -1, ids[2];
        OK(MPI_Request_get_status_some(2, rq, &outc, ids, MPI_STATUSES_IGNORE));
        CHECK(outc == 2, "get_status_some %d", outc);
        OK(MPI_Wait(&rq[0], &st));
        CHECK(in == from && st.MPI_SOURCE == from && st.MPI_TAG == 9, "wait after get_status");
        OK(MPI_Wait(&rq[1], MPI_STATUS_IGNORE));
        OK(MPI_Request_get_status(MPI_REQUEST_NULL, &flag, &st));
        CHECK(flag && st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_TAG == MPI_ANY_TAG,
              "null request status %d %d", st.MPI_SOURCE, st.MPI_TAG);
        OK(MPI_Request_get_status_any(2, rq, &idx, &flag, &st));
        CHECK(flag && idx == MPI_UNDEFINED, "get_status_any of null requests: %d", idx);
    }

    /* Generalized request. */
    {
        int src = 3;
        MPI_Request g;
        OK(MPI_Grequest_start(q_fn, f_fn, c_fn, &src, &g));
        int flag = 1;
        MPI_Status st;
        OK(MPI_Test(&g, &flag, &st));
        CHECK(!flag && queried == 0, "grequest complete before MPI_Grequest_complete");
        OK(MPI_Cancel(&g));
        CHECK(cancelled == 1, "cancel_fn(complete=0) not called: %d", cancelled);
        OK(MPI_Grequest_complete(g));
        OK(MPI_Wait(&g, &st));
        int n = -1;
        OK(MPI_Get_count(&st, MPI_BYTE, &n));
        CHECK(g == MPI_REQUEST_NULL && queried == 1 && freed == 1, "grequest callbacks %d %d",
              queried, freed);
        CHECK(st.MPI_SOURCE == 3 && st.MPI_TAG == 77 && n == 5, "grequest status %d %d %d",
              st.MPI_SOURCE, st.MPI_TAG, n);
    }

    /* User error classes: above MPI_ERR_LASTCODE, empty string until set. */
    {
        int cls = 0, code = 0, len = -1, *last = NULL, flag = 0;
        char s[MPI_MAX_ERROR_STRING];
        OK(MPI_Add_error_class(&cls));
        CHECK(cls > MPI_ERR_LASTCODE, "class %d", cls);
        OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &last, &flag));
        CHECK(flag && *last == cls, "MPI_LASTUSEDCODE %d, class %d", flag ? *last : -1, cls);
        OK(MPI_Error_string(cls, s, &len));
        CHECK(len == 0, "string of a new class: '%s'", s);
        OK(MPI_Add_error_code(cls, &code));
        int c2 = -1;
        OK(MPI_Error_class(code, &c2));
        CHECK(c2 == cls, "class of the new code");
        /* A value that is no error code is MPI_ERR_ARG (as MPI_Error_class says), with a
         * string that says so. */
        OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
        int rc = MPI_Error_string(code + 1000, s, &len);
        CHECK(rc == MPI_ERR_ARG, "MPI_Error_string of an unknown code returned %d", rc);
        CHECK(len > 0 && strstr(s, "is not an MPI error code") != NULL,
              "string of an unknown code: '%s'", s);
        rc = MPI_Error_string(-5, s, &len);
        CHECK(rc == MPI_ERR_ARG, "MPI_Error_string(-5) returned %d", rc);
        CHECK(strstr(s, "is not an MPI error code") != NULL, "string of -5: '%s'", s);
        rc = MPI_Error_class(-5, &c2);
        CHECK(rc == MPI_ERR_ARG, "MPI_Error_class(-5) returned %d", rc);
        /* Below MPI_LASTUSEDCODE but neither predefined nor added: no code either. */
        rc = MPI_Error_string(12345, s, &len);
        CHECK(rc == MPI_ERR_ARG && strstr(s, "is not an MPI error code") != NULL,
              "MPI_Error_string(12345) returned %d: '%s'", rc, s);
        rc = MPI_Error_class(12345, &c2);
        CHECK(rc == MPI_ERR_ARG, "MPI_Error_class(12345) returned %d", rc);
        /* Every predefined class, the tools interface's codes and LASTCODE are codes. */
        OK(MPI_Error_class(MPI_ERR_ABI, &c2));
        CHECK(c2 == MPI_ERR_ABI, "class of MPI_ERR_ABI: %d", c2);
        OK(MPI_Error_class(MPI_T_ERR_INVALID, &c2));
        OK(MPI_Error_string(MPI_ERR_LASTCODE, s, &len));
        /* Codes only for classes; strings only for the user's classes and codes. */
        int bad = -1;
        rc = MPI_Add_error_code(12345, &bad);
        CHECK(rc == MPI_ERR_ARG, "MPI_Add_error_code(12345) returned %d", rc);
        rc = MPI_Add_error_string(MPI_ERR_TRUNCATE, "mine");
        CHECK(rc == MPI_ERR_ARG, "MPI_Add_error_string(MPI_ERR_TRUNCATE) returned %d", rc);
        OK(MPI_Error_string(MPI_ERR_TRUNCATE, s, &len));
        CHECK(strstr(s, "mine") == NULL, "the predefined string was replaced: '%s'", s);
        OK(MPI_Add_error_string(code, "my code"));
        OK(MPI_Error_string(code, s, &len));
        CHECK(strcmp(s, "my code") == 0, "string of the user's code: '%s'", s);
        OK(MPI_Remove_error_string(code));
        OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL));
    }

    /* Info_create_env; null handle names; Pcontrol. */
    {
        MPI_Info e;
        OK(MPI_Info_create_env(argc, argv, &e));
        char v[64];
        int flag = 0;
        OK(MPI_Info_get_string(e, "maxprocs", &(int){64}, v, &flag));
        CHECK(flag && atoi(v) == p, "maxprocs '%s'", v);
        OK(MPI_Info_free(&e));
        char n[MPI_MAX_OBJECT_NAME];
        int len = 0;
        OK(MPI_Comm_get_name(MPI_COMM_NULL, n, &len));
        CHECK(strcmp(n, "MPI_COMM_NULL") == 0, "comm null name '%s'", n);
        OK(MPI_Type_get_name(MPI_DATATYPE_NULL, n, &len));
        CHECK(strcmp(n, "MPI_DATATYPE_NULL") == 0, "type null name '%s'", n);
        OK(MPI_Pcontrol(1));
    }

    /* Persistent neighborhood allgather on a periodic ring, started twice. */
    {
        MPI_Comm ring;
        int dims[1] = {p}, periods[1] = {1};
        OK(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring));
        int v = 0, got[2] = {-1, -1};
        MPI_Request q;
        OK(MPI_Neighbor_allgather_init(&v, 1, MPI_INT, got, 1, MPI_INT, ring, MPI_INFO_NULL, &q));
        for (int it = 0; it < 2; it++) {
            v = 10 * it + r;
            OK(MPI_Start(&q));
            OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
            int lo = 10 * it + (r + p - 1) % p, hi = 10 * it + (r + 1) % p;
            CHECK(got[0] == lo && got[1] == hi, "neighbor_allgather_init start %d: %d %d", it,
                  got[0], got[1]);
        }
        OK(MPI_Request_free(&q));
        OK(MPI_Comm_free(&ring));
    }

    /* Sendrecv_replace of zero elements (an empty buffer is not MPI_IN_PLACE). */
    {
        int dummy = 5;
        OK(MPI_Sendrecv_replace(&dummy, 0, MPI_INT, r, 0, r, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_Request q;
        OK(MPI_Isendrecv_replace(&dummy, 0, MPI_INT, r, 0, r, 0, MPI_COMM_WORLD, &q));
        OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        CHECK(dummy == 5, "zero-element replace changed the buffer");
    }

    OK(MPI_Finalize());
    if (rank == 0 && fails == 0) printf("mpi4_extras: ok, %d checks\n", checks);
    return fails ? 1 : 0;
}
