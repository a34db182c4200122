/* rankwire-test: ranks=2 */
/* The request table and the wait/test families: MPI_Waitall over a mix of
 * MPI_REQUEST_NULL, an inactive persistent request, active sends and receives and an
 * operation with MPI_PROC_NULL (statuses of the null and inactive ones empty, one-shot
 * handles set to MPI_REQUEST_NULL, the persistent one kept); MPI_Waitall with a handle
 * that is not a request under MPI_ERRORS_RETURN (MPI_ERR_IN_STATUS, that status's
 * MPI_ERROR = MPI_ERR_REQUEST, the others completed); a window of 64 nonblocking
 * operations per direction completed by one MPI_Waitall, 200 times (handles reused,
 * data checked); windows with statuses on MPI_COMM_WORLD and on a communicator
 * whose ranks are reversed, and one mixing plain, derived-type and persistent
 * operations; MPI_Testall / MPI_Testany / MPI_Waitsome on a mix; MPI_Request_free
 * of an active receive; small sends finished by each call of the wait/test families;
 * MPI_Request_get_status from another thread while MPI_Wait/MPI_Waitall complete
 * the request; and MPI_Grequest_complete called by another thread while the
 * main thread waits in MPI_Wait on that request (MPI_THREAD_MULTIPLE). Each rank
 * checks its results. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int checks = 0, fails = 0, rank = 0, size = 0;
#define CHECK(c, ...)                                                          \
    do {                                                                       \
        checks++;                                                              \
        if (!(c)) {                                                            \
            fails++;                                                           \
            fprintf(stderr, "requests rank %d line %d: ", rank, __LINE__);     \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
        }                                                                      \
    } while (0)
#define OK(call) CHECK((call) == MPI_SUCCESS, "%s failed", #call)

static int is_empty(const MPI_Status *st) {
    int n = -1;
    MPI_Get_count(st, MPI_INT, &n);
    return st->MPI_SOURCE == MPI_ANY_SOURCE && st->MPI_TAG == MPI_ANY_TAG && n == 0;
}

static int g_query(void *extra, MPI_Status *st) {
    (void)extra;
    MPI_Status_set_elements(st, MPI_INT, 3);
    st->MPI_SOURCE = 7;
    st->MPI_TAG = 8;
    return MPI_SUCCESS;
}
static int g_free(void *extra) { (void)extra; return MPI_SUCCESS; }
static int g_cancel(void *extra, int complete) { (void)extra; (void)complete; return MPI_SUCCESS; }

static void *completer(void *arg) {
    usleep(100 * 1000); /* the main thread is inside MPI_Wait by then */
    MPI_Grequest_complete(*(MPI_Request *)arg);
    return NULL;
}

static volatile int monitor_stop = 0;
static void *monitor(void *arg) {
    MPI_Request h = *(MPI_Request *)arg;
    int f;
    while (!monitor_stop) MPI_Request_get_status(h, &f, MPI_STATUS_IGNORE);
    return NULL;
}

int main(int argc, char **argv) {
    int provided = 0;
    OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int peer = 1 - rank;

    /* Waitall over a mix. */
    {
        int out = 100 + rank, in = -1, pin = -1, dummy = 0;
        MPI_Request q[5];
        MPI_Status st[5];
        q[0] = MPI_REQUEST_NULL;
        OK(MPI_Recv_init(&pin, 1, MPI_INT, peer, 9, MPI_COMM_WORLD, &q[1])); /* never started */
        OK(MPI_Irecv(&in, 1, MPI_INT, peer, 1, MPI_COMM_WORLD, &q[2]));
        OK(MPI_Isend(&out, 1, MPI_INT, peer, 1, MPI_COMM_WORLD, &q[3]));
        OK(MPI_Irecv(&dummy, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &q[4]));
        MPI_Request persistent = q[1];
        memset(st, 0x5a, sizeof st);
        OK(MPI_Waitall(5, q, st));
        CHECK(in == 100 + peer, "received %d, want %d", in, 100 + peer);
        CHECK(q[0] == MPI_REQUEST_NULL && q[2] == MPI_REQUEST_NULL && q[3] == MPI_REQUEST_NULL &&
                  q[4] == MPI_REQUEST_NULL,
              "one-shot requests not set to MPI_REQUEST_NULL");
        CHECK(q[1] == persistent, "the persistent request's handle changed");
        CHECK(is_empty(&st[0]), "status of MPI_REQUEST_NULL not empty");
        CHECK(is_empty(&st[1]), "status of an inactive persistent request not empty");
        CHECK(st[2].MPI_SOURCE == peer && st[2].MPI_TAG == 1, "receive status %d/%d",
              st[2].MPI_SOURCE, st[2].MPI_TAG);
        CHECK(st[4].MPI_SOURCE == MPI_PROC_NULL && st[4].MPI_TAG == MPI_ANY_TAG,
              "MPI_PROC_NULL receive status %d/%d", st[4].MPI_SOURCE, st[4].MPI_TAG);
        /* The persistent request still works. */
        int pout = 55 + rank;
        MPI_Request s;
        OK(MPI_Start(&q[1]));
        OK(MPI_Isend(&pout, 1, MPI_INT, peer, 9, MPI_COMM_WORLD, &s));
        OK(MPI_Wait(&q[1], &st[1]));
        OK(MPI_Wait(&s, MPI_STATUS_IGNORE));
        CHECK(pin == 55 + peer && st[1].MPI_TAG == 9, "persistent receive got %d", pin);
        OK(MPI_Request_free(&q[1]));
        CHECK(q[1] == MPI_REQUEST_NULL, "MPI_Request_free did not null the handle");
    }

    /* A handle that is not a request, under MPI_ERRORS_RETURN. */
    {
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        int out = 3, in = -1;
        MPI_Request q[3];
        MPI_Status st[3];
        OK(MPI_Irecv(&in, 1, MPI_INT, peer, 2, MPI_COMM_WORLD, &q[0]));
        MPI_Request stale;
        OK(MPI_Isend(&out, 1, MPI_INT, MPI_PROC_NULL, 2, MPI_COMM_WORLD, &stale));
        OK(MPI_Wait(&stale, MPI_STATUS_IGNORE));
        /* A request value that was completed and freed: the slot may be reused, so
         * make an invalid one instead (a datatype handle). */
        q[1] = (MPI_Request)(void *)MPI_INT;
        OK(MPI_Isend(&out, 1, MPI_INT, peer, 2, MPI_COMM_WORLD, &q[2]));
        int rc = MPI_Waitall(3, q, st);
        CHECK(rc == MPI_ERR_IN_STATUS, "Waitall with a bad handle returned %d", rc);
        CHECK(st[1].MPI_ERROR == MPI_ERR_REQUEST, "bad handle's MPI_ERROR %d", st[1].MPI_ERROR);
        CHECK(st[0].MPI_ERROR == MPI_SUCCESS && st[2].MPI_ERROR == MPI_SUCCESS,
              "good requests' MPI_ERROR %d %d", st[0].MPI_ERROR, st[2].MPI_ERROR);
        CHECK(in == 3 && q[0] == MPI_REQUEST_NULL && q[2] == MPI_REQUEST_NULL,
              "the good requests did not complete (in %d)", in);
        /* MPI_Testall with a bad handle beside a pending receive: MPI_ERR_REQUEST at
         * once, flag 0, the receive untouched (then received). */
        {
            int v = -1, flag = -1;
            MPI_Request q3[2];
            OK(MPI_Irecv(&v, 1, MPI_INT, peer, 4, MPI_COMM_WORLD, &q3[0]));
            q3[1] = (MPI_Request)(void *)MPI_INT;
            rc = MPI_Testall(2, q3, &flag, MPI_STATUSES_IGNORE);
            int cls = -1;
            MPI_Error_class(rc, &cls);
            CHECK(cls == MPI_ERR_REQUEST && flag == 0 && q3[0] != MPI_REQUEST_NULL,
                  "Testall with a bad handle beside a pending request: class %d flag %d", cls, flag);
            /* The peer sends only after every rank's Testall. */
            OK(MPI_Barrier(MPI_COMM_WORLD));
            OK(MPI_Send(&out, 1, MPI_INT, peer, 4, MPI_COMM_WORLD));
            OK(MPI_Wait(&q3[0], MPI_STATUS_IGNORE));
            CHECK(v == 3, "the receive beside the bad handle got %d", v);
        }
        /* The same through MPI_Waitsome: the completed request and the bad handle are
         * both reported (outcount 2), the bad one with its MPI_ERROR. */
        int in2 = -1, outcount = -1, idx[2] = {-1, -1};
        MPI_Request q2[2];
        MPI_Status st2[2];
        OK(MPI_Irecv(&in2, 1, MPI_INT, peer, 3, MPI_COMM_WORLD, &q2[0]));
        OK(MPI_Send(&out, 1, MPI_INT, peer, 3, MPI_COMM_WORLD));
        OK(MPI_Wait(&q2[0], MPI_STATUS_IGNORE)); /* complete it, then make a fresh one */
        OK(MPI_Irecv(&in2, 1, MPI_INT, MPI_PROC_NULL, 3, MPI_COMM_WORLD, &q2[0]));
        q2[1] = (MPI_Request)(void *)MPI_INT;
        rc = MPI_Waitsome(2, q2, &outcount, idx, st2);
        CHECK(rc == MPI_ERR_IN_STATUS && outcount == 2, "Waitsome with a bad handle: rc %d outcount %d", rc, outcount);
        CHECK(idx[0] == 0 && idx[1] == 1 && q2[0] == MPI_REQUEST_NULL, "Waitsome indices %d %d", idx[0], idx[1]);
        CHECK(st2[1].MPI_ERROR == MPI_ERR_REQUEST && st2[0].MPI_ERROR == MPI_SUCCESS,
              "Waitsome MPI_ERROR %d %d", st2[0].MPI_ERROR, st2[1].MPI_ERROR);
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    }

    /* Windows of 64 operations each way, one Waitall per window. */
    {
        enum { W = 64, ROUNDS = 200 };
        int sbuf[W], rbuf[W];
        MPI_Request q[2 * W];
        int bad = 0;
        for (int r = 0; r < ROUNDS; r++) {
            for (int i = 0; i < W; i++) {
                rbuf[i] = -1;
                OK(MPI_Irecv(&rbuf[i], 1, MPI_INT, peer, i, MPI_COMM_WORLD, &q[i]));
            }
            for (int i = 0; i < W; i++) {
                sbuf[i] = r * 1000 + i * 10 + rank;
                OK(MPI_Isend(&sbuf[i], 1, MPI_INT, peer, i, MPI_COMM_WORLD, &q[W + i]));
            }
            OK(MPI_Waitall(2 * W, q, MPI_STATUSES_IGNORE));
            for (int i = 0; i < W; i++) {
                if (rbuf[i] != r * 1000 + i * 10 + peer) bad++;
                if (q[i] != MPI_REQUEST_NULL || q[W + i] != MPI_REQUEST_NULL) bad++;
            }
        }
        CHECK(bad == 0, "%d wrong values or handles over %d windows", bad, ROUNDS);
    }

    /* Windows with statuses checked: on MPI_COMM_WORLD, on a communicator whose ranks
     * are not the world's (split with the ranks reversed: statuses name the sender by
     * its rank there), and a window that mixes plain operations with a derived-type
     * receive and a persistent send (the general path of MPI_Waitall). */
    {
        enum { W = 16 };
        MPI_Comm rev;
        OK(MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &rev));
        int rrank, rpeer;
        MPI_Comm_rank(rev, &rrank);
        rpeer = size - 1 - rrank;
        CHECK(rrank == size - 1 - rank, "reversed rank %d", rrank);
        MPI_Comm comms[2] = {MPI_COMM_WORLD, rev};
        int peers[2] = {peer, rpeer};
        for (int c = 0; c < 2; c++) {
            int sbuf[W], rbuf[W];
            MPI_Request q[2 * W];
            MPI_Status st[2 * W];
            for (int i = 0; i < W; i++) {
                rbuf[i] = -1;
                OK(MPI_Irecv(&rbuf[i], 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, comms[c], &q[i]));
            }
            for (int i = 0; i < W; i++) {
                sbuf[i] = 100 * c + i;
                OK(MPI_Isend(&sbuf[i], 1, MPI_INT, peers[c], 50 + i, comms[c], &q[W + i]));
            }
            OK(MPI_Waitall(2 * W, q, st));
            int bad = 0;
            for (int i = 0; i < W; i++) {
                int n = -1;
                MPI_Get_count(&st[i], MPI_INT, &n);
                if (rbuf[i] != 100 * c + i || st[i].MPI_SOURCE != peers[c] ||
                    st[i].MPI_TAG != 50 + i || n != 1 || q[i] != MPI_REQUEST_NULL)
                    bad++;
            }
            CHECK(bad == 0, "comm %d: %d wrong receives (first: value %d source %d tag %d)", c,
                  bad, rbuf[0], st[0].MPI_SOURCE, st[0].MPI_TAG);
        }
        /* Mixed: 8 plain receives, a vector receive, a persistent send, 8 plain sends. */
        MPI_Datatype vec;
        OK(MPI_Type_vector(3, 1, 2, MPI_INT, &vec));
        OK(MPI_Type_commit(&vec));
        int rb[8], vb[6] = {-1, -1, -1, -1, -1, -1}, sb[8], pv[3] = {7, 8, 9};
        MPI_Request q[18], pers;
        MPI_Status st[18];
        OK(MPI_Send_init(pv, 3, MPI_INT, rpeer, 99, rev, &pers));
        for (int i = 0; i < 8; i++) OK(MPI_Irecv(&rb[i], 1, MPI_INT, rpeer, i, rev, &q[i]));
        OK(MPI_Irecv(vb, 1, vec, rpeer, 99, rev, &q[8]));
        OK(MPI_Start(&pers));
        q[9] = pers;
        for (int i = 0; i < 8; i++) {
            sb[i] = 1000 + i;
            OK(MPI_Isend(&sb[i], 1, MPI_INT, rpeer, i, rev, &q[10 + i]));
        }
        OK(MPI_Waitall(18, q, st));
        int bad = 0;
        for (int i = 0; i < 8; i++)
            if (rb[i] != 1000 + i || st[i].MPI_SOURCE != rpeer || st[i].MPI_TAG != i) bad++;
        CHECK(bad == 0, "mixed window: %d wrong plain receives", bad);
        CHECK(vb[0] == 7 && vb[2] == 8 && vb[4] == 9 && vb[1] == -1 && st[8].MPI_SOURCE == rpeer &&
                  st[8].MPI_TAG == 99,
              "mixed window: vector receive %d %d %d, source %d", vb[0], vb[2], vb[4],
              st[8].MPI_SOURCE);
        CHECK(q[9] == pers && q[8] == MPI_REQUEST_NULL && q[0] == MPI_REQUEST_NULL,
              "mixed window: the persistent request stays, one-shot ones are freed");
        OK(MPI_Request_free(&pers));
        OK(MPI_Type_free(&vec));
        OK(MPI_Comm_free(&rev));
    }

    /* Testall / Testany / Waitsome. */
    {
        int in[3] = {-1, -1, -1}, out[3] = {10, 20, 30};
        MPI_Request q[4];
        MPI_Status st[4];
        int flag = 1, idx = -2, outcount = 0, indices[4];
        q[0] = MPI_REQUEST_NULL;
        for (int i = 0; i < 3; i++) OK(MPI_Irecv(&in[i], 1, MPI_INT, peer, 20 + i, MPI_COMM_WORLD, &q[1 + i]));
        OK(MPI_Testall(4, q, &flag, st));
        CHECK(flag == 0, "Testall true before any send");
        CHECK(q[1] != MPI_REQUEST_NULL, "Testall false completed a request");
        OK(MPI_Testany(4, q, &idx, &flag, st));
        CHECK(flag == 0 && idx == MPI_UNDEFINED, "Testany before sends: flag %d idx %d", flag, idx);
        OK(MPI_Barrier(MPI_COMM_WORLD)); /* both ranks tested before anything was sent */
        MPI_Request s[3];
        for (int i = 0; i < 3; i++) OK(MPI_Isend(&out[i], 1, MPI_INT, peer, 20 + i, MPI_COMM_WORLD, &s[i]));
        int got = 0;
        while (got < 3) {
            OK(MPI_Waitsome(4, q, &outcount, indices, st));
            CHECK(outcount >= 1 && outcount != MPI_UNDEFINED, "Waitsome outcount %d", outcount);
            for (int k = 0; k < outcount; k++) {
                int i = indices[k];
                CHECK(i >= 1 && i <= 3 && q[i] == MPI_REQUEST_NULL, "Waitsome index %d", i);
                CHECK(st[k].MPI_TAG == 19 + i, "Waitsome status tag %d for index %d", st[k].MPI_TAG, i);
            }
            got += outcount;
        }
        OK(MPI_Waitsome(4, q, &outcount, indices, st));
        CHECK(outcount == MPI_UNDEFINED, "Waitsome with nothing active: %d", outcount);
        CHECK(in[0] == 10 && in[1] == 20 && in[2] == 30, "values %d %d %d", in[0], in[1], in[2]);
        OK(MPI_Waitall(3, s, MPI_STATUSES_IGNORE));
    }

    /* MPI_Request_free of an active receive: the data still arrives. */
    {
        static int v = -1; /* written whenever the freed receive completes */
        int w = 77;
        MPI_Request q;
        OK(MPI_Irecv(&v, 1, MPI_INT, peer, 30, MPI_COMM_WORLD, &q));
        OK(MPI_Request_free(&q));
        CHECK(q == MPI_REQUEST_NULL, "freed request not null");
        OK(MPI_Send(&w, 1, MPI_INT, peer, 30, MPI_COMM_WORLD));
        OK(MPI_Barrier(MPI_COMM_WORLD));
        /* The freed receive matched the peer's send; a second message goes elsewhere. */
        int x = -1;
        OK(MPI_Sendrecv(&w, 1, MPI_INT, peer, 31, &x, 1, MPI_INT, peer, 31, MPI_COMM_WORLD,
                        MPI_STATUS_IGNORE));
        CHECK(x == 77, "message after a freed receive: %d", x);
    }

    /* Small sends (most complete as they are posted), each finished by another call
     * of the wait/test families; the handles behave as any request's. */
    {
        int vals[9], got[9], idx = -1, flag = 0, outcount = 0, indices[2];
        MPI_Request s[9];
        MPI_Status st;
        if (rank == 0) {
            for (int i = 0; i < 9; i++) {
                vals[i] = 100 + i;
                OK(MPI_Isend(&vals[i], 1, MPI_INT, 1, 40 + i, MPI_COMM_WORLD, &s[i]));
            }
            CHECK(MPI_Request_fromint(MPI_Request_toint(s[0])) == s[0], "toint/fromint");
            OK(MPI_Wait(&s[0], &st));
            MPI_Test_cancelled(&st, &flag);
            CHECK(s[0] == MPI_REQUEST_NULL && flag == 0, "Wait on a small send");
            do { OK(MPI_Test(&s[1], &flag, &st)); } while (!flag);
            CHECK(s[1] == MPI_REQUEST_NULL, "Test on a small send");
            OK(MPI_Waitany(2, &s[2], &idx, &st));
            CHECK(idx >= 0 && idx < 2 && s[2 + idx] == MPI_REQUEST_NULL, "Waitany %d", idx);
            int first = idx;
            OK(MPI_Waitany(2, &s[2], &idx, &st));
            CHECK(idx == 1 - first && s[2] == MPI_REQUEST_NULL && s[3] == MPI_REQUEST_NULL,
                  "second Waitany %d", idx);
            do { OK(MPI_Testany(1, &s[4], &idx, &flag, &st)); } while (!flag);
            CHECK(idx == 0 && s[4] == MPI_REQUEST_NULL, "Testany on a small send");
            OK(MPI_Waitsome(1, &s[5], &outcount, indices, MPI_STATUSES_IGNORE));
            CHECK(outcount == 1 && indices[0] == 0 && s[5] == MPI_REQUEST_NULL, "Waitsome");
            do { OK(MPI_Request_get_status(s[6], &flag, &st)); } while (!flag);
            CHECK(s[6] != MPI_REQUEST_NULL, "Request_get_status changed the handle");
            OK(MPI_Request_free(&s[6]));
            CHECK(s[6] == MPI_REQUEST_NULL, "Request_free on a small send");
            OK(MPI_Cancel(&s[7]));
            OK(MPI_Wait(&s[7], &st));
            MPI_Test_cancelled(&st, &flag);
            CHECK(s[7] == MPI_REQUEST_NULL && flag == 0, "a cancelled small send was delivered (flag %d)", flag);
            do { OK(MPI_Testsome(1, &s[8], &outcount, indices, MPI_STATUSES_IGNORE)); } while (outcount == 0);
            CHECK(outcount == 1 && s[8] == MPI_REQUEST_NULL, "Testsome on a small send");
            /* Finished handles are null: a second wait is a no-op on an empty status. */
            OK(MPI_Waitall(9, s, MPI_STATUSES_IGNORE));
        } else {
            for (int i = 0; i < 9; i++) {
                OK(MPI_Recv(&got[i], 1, MPI_INT, 0, 40 + i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                CHECK(got[i] == 100 + i, "small send %d delivered %d", i, got[i]);
            }
        }
    }

    /* MPI_Request_get_status from another thread while MPI_Waitall and MPI_Wait
     * complete the request: the wait succeeds (it failed with MPI_ERR_REQUEST, "being
     * completed by another thread", 13-21 times in 25: trial of 2026-12-07). The
     * monitor may call on the handle after the wait freed it: MPI_ERRORS_RETURN. */
    if (provided == MPI_THREAD_MULTIPLE) {
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
        int badw = 0, badv = 0;
        for (int it = 0; it < 50; it++) {
            int a = -1, out = 1000 + it;
            MPI_Request q[2], h0;
            MPI_Irecv(&a, 1, MPI_INT, peer, 300 + it, MPI_COMM_WORLD, &q[0]);
            MPI_Isend(&out, 1, MPI_INT, peer, 300 + it, MPI_COMM_WORLD, &q[1]);
            h0 = q[0];
            monitor_stop = 0;
            pthread_t th;
            pthread_create(&th, NULL, monitor, &h0);
            usleep(500);
            int rc = it % 2 ? MPI_Waitall(2, q, MPI_STATUSES_IGNORE)
                            : (MPI_Wait(&q[0], MPI_STATUS_IGNORE) | MPI_Wait(&q[1], MPI_STATUS_IGNORE));
            monitor_stop = 1;
            pthread_join(th, NULL);
            if (rc != MPI_SUCCESS) badw++;
            if (a != 1000 + it) badv++;
        }
        CHECK(badw == 0 && badv == 0, "get_status beside a wait: %d failed waits, %d wrong values", badw,
              badv);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
        MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL);
    }

    /* A copy of a request's handle used after the request completed: every call
     * returns MPI_ERR_REQUEST at once (a receive on MPI_COMM_WORLD, whose handle
     * carries the runtime's request id, and one on a duplicate, whose handle is a
     * table slot). Also MPI_Request_toint/fromint of a pending receive: the same
     * handle back, which completes it. */
    if (size >= 2) {
        MPI_Comm dup;
        OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
        MPI_Comm comms[2] = {MPI_COMM_WORLD, dup};
        /* A handle that names no request reports on MPI_COMM_WORLD's handler. */
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        for (int c = 0; c < 2; c++) {
            MPI_Comm cm = comms[c];
            OK(MPI_Comm_set_errhandler(cm, MPI_ERRORS_RETURN));
            int in = -1, out = 500 + c, flag = 0, cls = 0;
            MPI_Request q, copy;
            MPI_Status st;
            if (rank == 0) {
                OK(MPI_Irecv(&in, 1, MPI_INT, 1, 91, cm, &q));
                int i = MPI_Request_toint(q);
                CHECK(MPI_Request_fromint(i) == q, "comm %d: toint/fromint of a pending receive", c);
                CHECK(MPI_Request_toint(q) == i, "comm %d: toint twice gave two ints", c);
                copy = MPI_Request_fromint(i);
                OK(MPI_Barrier(cm));
                OK(MPI_Wait(&copy, &st));
                CHECK(in == 500 + c && copy == MPI_REQUEST_NULL && st.MPI_SOURCE == 1 && st.MPI_TAG == 91,
                      "comm %d: receive completed through fromint's handle: in %d", c, in);
                /* q is now a copy of a completed request's handle. */
                MPI_Error_class(MPI_Wait(&q, &st), &cls);
                CHECK(cls == MPI_ERR_REQUEST, "comm %d: Wait on a completed request's copy: class %d", c, cls);
                MPI_Error_class(MPI_Test(&q, &flag, &st), &cls);
                CHECK(cls == MPI_ERR_REQUEST, "comm %d: Test on a completed request's copy: class %d", c, cls);
                MPI_Error_class(MPI_Request_get_status(q, &flag, &st), &cls);
                CHECK(cls == MPI_ERR_REQUEST, "comm %d: get_status on a completed request's copy: class %d", c, cls);
                MPI_Error_class(MPI_Cancel(&q), &cls);
                CHECK(cls == MPI_ERR_REQUEST, "comm %d: Cancel on a completed request's copy: class %d", c, cls);
                MPI_Status sa[1];
                MPI_Request stale = q;
                int rc = MPI_Waitall(1, &q, sa);
                CHECK((rc == MPI_ERR_IN_STATUS && sa[0].MPI_ERROR == MPI_ERR_REQUEST) || rc == MPI_ERR_REQUEST,
                      "comm %d: Waitall on a completed request's copy: rc %d, MPI_ERROR %d", c, rc, sa[0].MPI_ERROR);
                CHECK(q == stale, "comm %d: Waitall changed a handle that names no request", c);
                MPI_Request q2 = q;
                MPI_Error_class(MPI_Request_free(&q2), &cls);
                CHECK(cls == MPI_ERR_REQUEST, "comm %d: Request_free of a completed request's copy: class %d", c, cls);
                /* Beside a pending receive, MPI_Testall reports the stale copy at once
                 * and completes nothing; beside a collective request (MPI_Waitall's
                 * general path) it fails in its status. Fast handles only: a table
                 * handle's slot is reused by the next request, which its stale copy
                 * then names. */
                int in2 = -1;
                MPI_Request two[2];
                OK(MPI_Irecv(&in2, 1, MPI_INT, 1, 92, cm, &two[0]));
                if (c == 0) {
                    two[1] = stale;
                    flag = 1;
                    MPI_Error_class(MPI_Testall(2, two, &flag, MPI_STATUSES_IGNORE), &cls);
                    CHECK(cls == MPI_ERR_REQUEST && flag == 0 && two[0] != MPI_REQUEST_NULL,
                          "Testall with a completed request's copy: class %d flag %d", cls, flag);
                }
                MPI_Request mix[2];
                MPI_Status ms[2];
                OK(MPI_Ibarrier(cm, &mix[0]));
                if (c == 0) {
                    mix[1] = stale;
                    rc = MPI_Waitall(2, mix, ms);
                    CHECK(rc == MPI_ERR_IN_STATUS && ms[1].MPI_ERROR == MPI_ERR_REQUEST &&
                              ms[0].MPI_ERROR == MPI_SUCCESS && mix[0] == MPI_REQUEST_NULL,
                          "Waitall of an Ibarrier and a completed request's copy: rc %d, MPI_ERROR %d %d",
                          rc, ms[0].MPI_ERROR, ms[1].MPI_ERROR);
                } else {
                    OK(MPI_Wait(&mix[0], MPI_STATUS_IGNORE));
                }
                OK(MPI_Wait(&two[0], MPI_STATUS_IGNORE));
                CHECK(in2 == 600 + c, "comm %d: the receive beside Testall got %d", c, in2);
            } else {
                OK(MPI_Barrier(cm));
                if (rank == 1) OK(MPI_Send(&out, 1, MPI_INT, 0, 91, cm));
                MPI_Request b;
                OK(MPI_Ibarrier(cm, &b));
                OK(MPI_Wait(&b, MPI_STATUS_IGNORE));
                int out2 = 600 + c;
                if (rank == 1) OK(MPI_Send(&out2, 1, MPI_INT, 0, 92, cm));
            }
        }
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
        OK(MPI_Comm_free(&dup));
        /* Many requests through MPI_Request_toint/fromint (MPI_Request_c2f/f2c in
         * Fortran-style code): each int converts back to its handle while the request
         * is pending, and no longer once it completed. */
        if (rank == 0) {
            int bad = 0;
            for (int i = 0; i < 20000; i++) {
                int v = i, w = -1;
                MPI_Request r;
                OK(MPI_Irecv(&w, 1, MPI_INT, 0, 5, MPI_COMM_SELF, &r));
                int ri = MPI_Request_toint(r);
                OK(MPI_Send(&v, 1, MPI_INT, 0, 5, MPI_COMM_SELF));
                MPI_Request back = MPI_Request_fromint(ri), was = r;
                if (back != r) bad++;
                OK(MPI_Wait(&back, MPI_STATUS_IGNORE));
                if (w != v || MPI_Request_fromint(ri) == was) bad++;
            }
            CHECK(bad == 0, "toint/fromint of 20000 requests: %d wrong", bad);
            /* Two sends alike (tag, destination, length) that completed when posted
             * still have two handles. */
            int x = 3, y[2];
            MPI_Request a[2];
            OK(MPI_Isend(&x, 1, MPI_INT, 0, 6, MPI_COMM_SELF, &a[0]));
            OK(MPI_Isend(&x, 1, MPI_INT, 0, 6, MPI_COMM_SELF, &a[1]));
            CHECK(a[0] != a[1], "two active sends share the handle %#lx", (unsigned long)a[0]);
            OK(MPI_Recv(&y[0], 1, MPI_INT, 0, 6, MPI_COMM_SELF, MPI_STATUS_IGNORE));
            OK(MPI_Recv(&y[1], 1, MPI_INT, 0, 6, MPI_COMM_SELF, MPI_STATUS_IGNORE));
            OK(MPI_Waitall(2, a, MPI_STATUSES_IGNORE));
            CHECK(y[0] == 3 && y[1] == 3 && a[0] == MPI_REQUEST_NULL && a[1] == MPI_REQUEST_NULL,
                  "two sends alike: %d %d", y[0], y[1]);
        }
    }

    /* A generalized request completed by another thread during MPI_Wait. */
    if (provided == MPI_THREAD_MULTIPLE) {
        MPI_Request g;
        MPI_Status st;
        OK(MPI_Grequest_start(g_query, g_free, g_cancel, NULL, &g));
        MPI_Request copy = g;
        pthread_t t;
        CHECK(pthread_create(&t, NULL, completer, &copy) == 0, "pthread_create");
        OK(MPI_Wait(&g, &st));
        pthread_join(t, NULL);
        int n = -1;
        MPI_Get_count(&st, MPI_INT, &n);
        CHECK(g == MPI_REQUEST_NULL && st.MPI_SOURCE == 7 && st.MPI_TAG == 8 && n == 3,
              "generalized request status %d/%d/%d", st.MPI_SOURCE, st.MPI_TAG, n);
    }

    OK(MPI_Finalize());
    if (rank == 0 && fails == 0) printf("requests: ok, %d checks\n", checks);
    return fails ? 1 : 0;
}
