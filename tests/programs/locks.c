/* A target for the pthread tapset: two threads take a mutex 1000 times
 * each, a reader and a writer share a rwlock, a consumer waits on a
 * condition variable for a producer, and main joins them all. It prints
 * nothing. */
#include <pthread.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static volatile long counter, shared, ready;

static void *adder(void *arg) {
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&m);
        counter++;
        pthread_mutex_unlock(&m);
    }
    return arg;
}

static void *reader(void *arg) {
    long s = 0;
    for (int i = 0; i < 100; i++) {
        pthread_rwlock_rdlock(&rw);
        s += shared;
        pthread_rwlock_unlock(&rw);
    }
    return (void *)s;
}

static void *writer(void *arg) {
    for (int i = 0; i < 50; i++) {
        pthread_rwlock_wrlock(&rw);
        shared++;
        pthread_rwlock_unlock(&rw);
    }
    return arg;
}

static void *consumer(void *arg) {
    pthread_mutex_lock(&m);
    while (!ready) pthread_cond_wait(&c, &m);
    pthread_mutex_unlock(&m);
    return arg;
}

int main(void) {
    pthread_t t[5];
    pthread_create(&t[0], 0, adder, 0);
    pthread_create(&t[1], 0, adder, 0);
    pthread_create(&t[2], 0, reader, 0);
    pthread_create(&t[3], 0, writer, 0);
    pthread_create(&t[4], 0, consumer, 0);
    pthread_mutex_lock(&m);
    ready = 1;
    pthread_cond_signal(&c);
    pthread_mutex_unlock(&m);
    for (int i = 0; i < 5; i++) pthread_join(t[i], 0);
    return counter == 2000 && shared == 50 ? 0 : 1;
}
