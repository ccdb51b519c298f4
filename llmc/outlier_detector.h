/*
llmc/outlier_detector.h: z-score of a value against a rolling window of the previous values,
used to spot loss and gradient-norm spikes (the trainer's -sl / -sg flags).

outlier_zscore(d, x) returns (x - mean) / std over the last OUTLIER_DETECTOR_WINDOW_SIZE (128)
values in the window (population std) without changing it; outlier_push(d, x) adds x to the
window; update_detector(d, x) does both. The trainers (llmc/trainer.h) push only finite values
of steps whose update was applied, so one bad step cannot poison the next 128 z-scores. It returns NAN while fewer than
128 values have been seen, i.e. for the first 128 calls. With a constant window (std 0) it
returns 0 if x equals the mean and +/-INFINITY otherwise. Mean and std are recomputed from the
window each call (256 flops), so there is no drift from running sums over long runs.
*/
#ifndef LLMC_OUTLIER_DETECTOR_H
#define LLMC_OUTLIER_DETECTOR_H

#include <math.h>

#define OUTLIER_DETECTOR_WINDOW_SIZE 128

typedef struct {
    double buffer[OUTLIER_DETECTOR_WINDOW_SIZE];  // ring buffer of the last values
    int count;  // values seen, capped at the window size
    int index;  // where the next value goes
} OutlierDetector;

static inline void init_detector(OutlierDetector* d) {
    for (int i = 0; i < OUTLIER_DETECTOR_WINDOW_SIZE; i++) { d->buffer[i] = 0.0; }
    d->count = 0;
    d->index = 0;
}

static inline double outlier_zscore(const OutlierDetector* d, double x) {
    if (d->count < OUTLIER_DETECTOR_WINDOW_SIZE) { return NAN; }
    double sum = 0.0;
    for (int i = 0; i < OUTLIER_DETECTOR_WINDOW_SIZE; i++) { sum += d->buffer[i]; }
    double mean = sum / OUTLIER_DETECTOR_WINDOW_SIZE;
    double ss = 0.0;
    for (int i = 0; i < OUTLIER_DETECTOR_WINDOW_SIZE; i++) {
        double dev = d->buffer[i] - mean;
        ss += dev * dev;
    }
    double std = sqrt(ss / OUTLIER_DETECTOR_WINDOW_SIZE);
    if (std > 0.0) { return (x - mean) / std; }
    return x == mean ? 0.0 : (x > mean ? INFINITY : -INFINITY);
}

static inline void outlier_push(OutlierDetector* d, double x) {
    d->buffer[d->index] = x;
    d->index = (d->index + 1) % OUTLIER_DETECTOR_WINDOW_SIZE;
    if (d->count < OUTLIER_DETECTOR_WINDOW_SIZE) { d->count++; }
}

static inline double update_detector(OutlierDetector* d, double x) {
    double z = outlier_zscore(d, x);
    outlier_push(d, x);
    return z;
}

#endif // LLMC_OUTLIER_DETECTOR_H
