/*
dev/test/test_nanochat_kernels_host.c: the host halves of nanochat's GPU kernels on the CPU -- ReLU^2
(llmc/cuda/relu2.cuh) and the logit softcap (llmc/cuda/fused_classifier.cuh): values, and derivatives against
central differences in double precision.
*/
#include "../../llmc/cuda/relu2.cuh"
#include "../../llmc/cuda/fused_classifier.cuh"
#include "test_common.h"

// d f / dx at x by central differences, f evaluated in double
static double central_difference(double (*f)(double, double), double x, double arg) {
    const double h = 1e-6;
    return (f(x + h, arg) - f(x - h, arg)) / (2.0 * h);
}

static double relu2_double(double x, double unused) {
    (void)unused;
    return x > 0.0 ? x * x : 0.0;
}

static double softcap_double(double z, double cap) { return cap * tanh(z / cap); }

static void test_relu2(void) {
    const float xs[] = {-3.0f, -1e-3f, 0.0f, 1e-3f, 0.5f, 2.0f, 7.25f};
    for (size_t i = 0; i < sizeof(xs) / sizeof(xs[0]); i++) {
        float x = xs[i];
        CHECK(relu2_value(x) == (x > 0.0f ? x * x : 0.0f), "relu2(%g) = %g", x, relu2_value(x));
        if (x != 0.0f) {
            double want = central_difference(relu2_double, x, 0.0);
            CHECK(fabs(relu2_grad(x) - want) <= 1e-5 * (1.0 + fabs(want)), "relu2'(%g) = %g, want %g", x, relu2_grad(x), want);
        }
    }
    CHECK(relu2_grad(0.0f) == 0.0f && relu2_grad(-2.0f) == 0.0f, "relu2' is 0 at and below 0");
}

static void test_softcap(void) {
    const float cap = 15.0f;
    float* z = random_array(64, 37);
    for (int i = 0; i < 64; i++) {
        float x = z[i] * 60.0f;  // well inside and far outside the cap
        float y = softcap_value(x, cap);
        CHECK(fabs(y - softcap_double(x, cap)) <= 1e-5 * cap && fabsf(y) <= cap, "softcap(%g) = %g", x, y);
        double want = central_difference(softcap_double, x, cap);
        CHECK(fabs(softcap_grad(y, cap) - want) <= 1e-4, "softcap'(%g) from y = %g: %g, want %g", x, y, softcap_grad(y, cap), want);
    }
    CHECK(softcap_value(0.0f, cap) == 0.0f && softcap_grad(0.0f, cap) == 1.0f, "the cap is the identity's slope at 0");
    free(z);
}

int main(void) {
    test_relu2();
    test_softcap();
    return test_summary();
}
