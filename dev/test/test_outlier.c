// dev/test/test_outlier.c: unit tests of llmc/outlier_detector.h against a direct computation.
#include <math.h>
#include <stdint.h>
#include "llmc/outlier_detector.h"
#include "dev/test/test_common.h"

#define N 1000

// z-score of xs[i] against xs[i-128 .. i-1], computed directly in long double
static double direct_z(const double* xs, int i) {
    long double sum = 0.0L, ss = 0.0L;
    for (int j = i - 128; j < i; j++) { sum += xs[j]; }
    long double mean = sum / 128.0L;
    for (int j = i - 128; j < i; j++) { ss += (xs[j] - mean) * (xs[j] - mean); }
    return (double)((xs[i] - mean) / sqrtl(ss / 128.0L));
}

int main(void) {
    static double xs[N];
    uint64_t st = 12345;
    for (int i = 0; i < N; i++) {
        st ^= st >> 12; st ^= st << 25; st ^= st >> 27;
        double u = (double)((st * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0;
        xs[i] = 3.0 + 0.1 * sin(i * 0.05) + 0.01 * u;  // a loss-like series
    }
    xs[500] = 5.0;  // a spike

    OutlierDetector d;
    init_detector(&d);
    int nan_first = 1, close = 1;
    double spike_z = 0.0;
    for (int i = 0; i < N; i++) {
        double z = update_detector(&d, xs[i]);
        if (i < 128) {
            if (!isnan(z)) { nan_first = 0; }
        } else {
            double want = direct_z(xs, i);
            if (!(fabs(z - want) <= 1e-9 * fmax(1.0, fabs(want)))) { close = 0; }
            if (i == 500) { spike_z = z; }
        }
    }
    CHECK(nan_first, "NAN for the first 128 values");
    CHECK(close, "z-scores equal the direct computation over the previous 128 values");
    CHECK(spike_z > 10.0, "the spike stands out (z = %f)", spike_z);

    // constant window: 0 for the same value, infinite for another
    init_detector(&d);
    for (int i = 0; i < 128; i++) { update_detector(&d, 2.0); }
    CHECK(update_detector(&d, 2.0) == 0.0, "constant window, same value: z = 0");
    double up = update_detector(&d, 2.5);
    CHECK(isinf(up) && up > 0, "constant window, larger value: z = +inf");
    // re-init starts over
    init_detector(&d);
    CHECK(isnan(update_detector(&d, 1.0)), "init_detector empties the window");
    return test_summary();
}
