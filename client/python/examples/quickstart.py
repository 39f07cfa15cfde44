#!/usr/bin/env python3
"""posbias quick start: a density, a fit, and one measurement job end to end.

    pip install ./client/python                 # in a virtual environment
    python client/python/examples/quickstart.py --server 127.0.0.1:50051 [--plot job.png]

Needs a running posbias-server (bash scripts/serve.sh). Takes a few seconds: the job measures a
tiny GPT-2 (2 layers, width 64) at seeded random initialization.
"""

import argparse

import numpy as np

import posbias


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", default=posbias.DEFAULT_ADDRESS, help="HOST:PORT of posbias-server")
    parser.add_argument("--plot", help="also draw the job's profile to this image file (needs matplotlib)")
    args = parser.parse_args()

    with posbias.Client(args.server) as client:
        # 1. The continuum density rho_H(x) of a 24-layer model with alpha = 0.5, on a log grid.
        rho = client.evaluate_continuum(24, alpha=0.5, grid=(1e-6, 1.0, 7))
        print("x       ", np.array2string(rho.x, precision=3))
        print("density ", np.array2string(rho.density, precision=4))
        print("atom %.3g (the last token's point mass), floor %.3g" % (rho.atom, rho.floor))

        # 2. Fit alpha to a profile: here the exact squared coherent row of H = 12, alpha = 0.3.
        row = client.evaluate_discrete(12, 256, alpha=0.3, profiles="coherent").coherent
        fit = client.fit_profile(row ** 2, depth=12)
        print("fitted alpha %.4f (true 0.3), lambda = alpha H = %.3f, rmse_log %.2g"
              % (fit.coherent.alpha, fit.coherent.lambda_, fit.coherent.metrics.rmse_log))

        # 3. A measurement job: register a tiny GPT-2, measure its Jacobian norms, compare.
        name = "quickstart-gpt2"
        try:
            model = client.get_model(name)
        except posbias.NotFoundError:
            model = client.register_model(name, preset="gpt2-tiny", seed=1)
        print("model %s: %s, %d parameters" % (model.name, model.state, model.parameter_count))
        job = client.submit_jacobian(name, 64, samples=4, method="exact", seed=3)
        job.wait(progress=True)          # a progress bar; Ctrl-C stops waiting, not the job
        if job.state != "succeeded":
            raise SystemExit("job %s ended %s: %s" % (job.id, job.state, job.error))
        result = job.result()
        print("positions %d..%d, sq_norm_mean first %.4g last %.4g"
              % (result.positions[0], result.positions[-1], result.sq_norm_mean[0], result.sq_norm_mean[-1]))
        for theory in result.fits:
            print("%-10s alpha %.4f  lambda %.3f [%.3f, %.3f]" % (theory.model, theory.alpha, theory.lambda_,
                                                                   theory.lambda_sample_low, theory.lambda_sample_high))
        if args.plot:
            import matplotlib
            matplotlib.use("Agg")
            ax = job.plot()
            ax.figure.savefig(args.plot)
            print("plot written to", args.plot)
        job.delete()


if __name__ == "__main__":
    main()
