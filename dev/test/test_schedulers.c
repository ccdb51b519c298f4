// dev/test/test_schedulers.c: unit tests of llmc/schedulers.h against the closed forms.
#include <math.h>
#include "llmc/schedulers.h"
#include "dev/test/test_common.h"

static int close_to(float got, double want) { return fabs((double)got - want) <= 1e-7 * fmax(1.0, fabs(want)); }

static void bad_type(void* arg) {
    LearningRateScheduler s;
    lr_scheduler_init(&s, (const char*)arg, 1e-3f, 10, 100, 0.1f);
}

static void bad_warmup(void* arg) {
    (void)arg;
    LearningRateScheduler s;
    lr_scheduler_init(&s, "cosine", 1e-3f, -1, 100, 0.1f);
}

int main(void) {
    const double pi = 3.14159265358979323846;
    LearningRateScheduler s;
    double lr = (double)6e-4f, lr_min = lr * (double)0.1f;

    // cosine: warmup 10, total 110
    lr_scheduler_init(&s, "cosine", 6e-4f, 10, 110, 0.1f);
    CHECK(strcmp(lr_scheduler_name(&s), "cosine") == 0, "name");
    CHECK(close_to(get_learning_rate(&s, 0), lr * 1 / 10), "cosine warmup step 0 = lr/10");
    CHECK(close_to(get_learning_rate(&s, 4), lr * 5 / 10), "cosine warmup step 4 = lr/2");
    CHECK(close_to(get_learning_rate(&s, 9), lr), "cosine warmup ends at lr");
    CHECK(close_to(get_learning_rate(&s, 10), lr), "cosine starts at lr");
    CHECK(close_to(get_learning_rate(&s, 35), lr_min + 0.5 * (1 + cos(pi * 0.25)) * (lr - lr_min)), "cosine at 25%%");
    CHECK(close_to(get_learning_rate(&s, 60), lr_min + 0.5 * (lr - lr_min)), "cosine at half way");
    CHECK(close_to(get_learning_rate(&s, 110), lr_min), "cosine ends at lr_min");
    CHECK(close_to(get_learning_rate(&s, 1000), lr_min), "cosine past the end stays at lr_min");

    // linear
    lr_scheduler_init(&s, "linear", 6e-4f, 10, 110, 0.1f);
    CHECK(close_to(get_learning_rate(&s, 2), lr * 3 / 10), "linear warmup");
    CHECK(close_to(get_learning_rate(&s, 35), lr - 0.25 * (lr - lr_min)), "linear at 25%%");
    CHECK(close_to(get_learning_rate(&s, 110), lr_min) && close_to(get_learning_rate(&s, 500), lr_min), "linear end");

    // constant
    lr_scheduler_init(&s, "constant", 6e-4f, 10, 110, 0.1f);
    CHECK(close_to(get_learning_rate(&s, 4), lr / 2) && close_to(get_learning_rate(&s, 10), lr)
          && close_to(get_learning_rate(&s, 1000), lr), "constant: warmup then lr");

    // wsd: total 100, decay starts at 80
    lr_scheduler_init(&s, "wsd", 6e-4f, 10, 100, 0.1f);
    CHECK(close_to(get_learning_rate(&s, 4), lr / 2), "wsd warmup");
    CHECK(close_to(get_learning_rate(&s, 50), lr) && close_to(get_learning_rate(&s, 79), lr), "wsd stable");
    CHECK(close_to(get_learning_rate(&s, 80), lr), "wsd decay starts at lr");
    CHECK(close_to(get_learning_rate(&s, 85), lr_min + (1 - sqrt(0.25)) * (lr - lr_min)), "wsd 1 - sqrt decay");
    CHECK(close_to(get_learning_rate(&s, 100), lr_min) && close_to(get_learning_rate(&s, 300), lr_min), "wsd end");
    // warmup longer than the stable phase: decay starts right after warmup
    lr_scheduler_init(&s, "wsd", 6e-4f, 90, 100, 0.1f);
    CHECK(close_to(get_learning_rate(&s, 90), lr) && close_to(get_learning_rate(&s, 95), lr_min + (1 - sqrt(0.5)) * (lr - lr_min)),
          "wsd with warmup past 80%%");

    // degenerate settings never divide by zero
    const char* types[4] = {"cosine", "linear", "constant", "wsd"};
    int finite = 1;
    for (int t = 0; t < 4; t++) {
        int cfg[4][2] = {{0, 100}, {10, 10}, {0, 0}, {5, 0}};  // (warmup, total)
        for (int c = 0; c < 4; c++) {
            lr_scheduler_init(&s, types[t], 6e-4f, cfg[c][0], cfg[c][1], 0.1f);
            for (int step = 0; step < 20; step++) {
                float v = get_learning_rate(&s, step);
                if (!isfinite(v) || v < 0.0f || v > 6e-4f * 1.0000001f) { finite = 0; }
            }
        }
    }
    CHECK(finite, "warmup 0, total == warmup, total 0: finite rates in [0, lr]");
    lr_scheduler_init(&s, "cosine", 6e-4f, 0, 100, 0.1f);
    CHECK(close_to(get_learning_rate(&s, 0), lr), "warmup 0 starts at lr");
    lr_scheduler_init(&s, "cosine", 6e-4f, 10, 10, 0.1f);
    CHECK(close_to(get_learning_rate(&s, 9), lr) && close_to(get_learning_rate(&s, 10), lr_min), "total == warmup");
    lr_scheduler_init(&s, "cosine", 6e-4f, 0, 0, 1.0f);
    CHECK(close_to(get_learning_rate(&s, 5), lr), "total 0 with final frac 1 keeps lr");
    // the defaults of both trainers: cosine, warmup 0, final frac 1.0 -> constant lr
    lr_scheduler_init(&s, "cosine", 3e-4f, 0, 40, 1.0f);
    CHECK(get_learning_rate(&s, 0) == 3e-4f && get_learning_rate(&s, 20) == 3e-4f && get_learning_rate(&s, 39) == 3e-4f,
          "defaults give exactly lr every step");

    expect_die("unknown type", bad_type, (void*)"cosin", "unknown learning rate schedule 'cosin'",
               "valid: cosine, linear, constant, wsd");
    expect_die("negative warmup", bad_warmup, NULL, "warmup", "-1");
    return test_summary();
}
