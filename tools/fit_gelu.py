#!/usr/bin/env python3
"""Coefficients of the GELU's polynomial (attn__gelu_as, src/kernels/ew.c):

    P(a) = c0 + a (c1 + a (c2 + ... + a c10)) ~ Phi(-a)^(1/16)   on 0 <= a <= AMAX,

Phi the standard normal CDF, so that Phi(-|x|) = P(|x|)^16 (four squarings) and
gelu(x) = x Phi(x) = x Phi(-|x|) for x <= 0, x - x Phi(-|x|) for x > 0.  c0 is 2^(-1/16) in
float.  Fit: minimax of the relative error of P (weighted, below), in float64, by linear
programming on a dense grid; then c1, c2, ... rounded to float one at a time, the later ones
refitted after each rounding (so the rounding of the earlier ones is absorbed by the rest).

Weight: the relative error of P^16 is the relative error of gelu(x) for x < 0; it is kept
uniform while |gelu| > G0 and may grow as G0 / |gelu| below that (the absolute error there
stays below G0 times the uniform bound).

Rerun:  python3 tools/fit_gelu.py   (numpy, scipy; prints the C constants; takes seconds) """
import numpy as np
from numpy.polynomial import Chebyshev
from scipy.optimize import linprog
from scipy.special import erfc

AMAX, DEG, G0 = 7.0, 10, 1e-6  # beyond AMAX the kernels take Phi(-a) = 0: |gelu| < 1e-11

a = np.unique(np.concatenate([np.linspace(0, AMAX, 6000),
                              AMAX * (1 - np.cos(np.linspace(0, np.pi / 2, 6000)))]))
q = erfc(a / np.sqrt(2))
f = (q / 2) ** (1 / 16)  # Phi(-a)^(1/16)
w = 1 / (f * np.maximum(1.0, G0 / np.maximum(0.5 * a * q, 1e-300)))  # weighted relative error
C0 = float(np.float32(2 ** (-1 / 16)))


def minimax(cols, rhs):
    """x minimising max |cols x - rhs| (rows already weighted); rows rescaled so HiGHS sees ~1."""
    s = 1.0
    for _ in range(3):
        m, n = cols.shape
        A = np.block([[cols * s, -np.ones((m, 1))], [-cols * s, -np.ones((m, 1))]])
        b = np.concatenate([rhs * s, -rhs * s])
        cost = np.zeros(n + 1)
        cost[-1] = 1
        r = linprog(cost, A_ub=A, b_ub=b, bounds=[(None, None)] * (n + 1), method="highs")
        assert r.success, r.message
        x = r.x[:n]
        s = 1 / np.max(np.abs(cols @ x - rhs))
    return x, 1 / s


fixed = []  # c1, c2, ... already rounded to float
for j in range(DEG):
    # P = c0 + sum_{k<=j} c_k a^k + (a/AMAX)^(j+1) S(a), S in the Chebyshev basis of [0, AMAX]
    known = C0 + sum(c * a ** (k + 1) for k, c in enumerate(fixed))
    u = (a / AMAX) ** (j + 1)
    basis = [u * Chebyshev.basis(m, domain=[0, AMAX])(a) for m in range(DEG - j)]
    s, err = minimax(np.stack(basis, 1) * w[:, None], (f - known) * w)
    if j == 0:
        print(f"/* float64 fit: max weighted relative error of P {err:.3g} */")
    mono = Chebyshev(s, domain=[0, AMAX]).convert(kind=np.polynomial.Polynomial).coef
    fixed.append(float(np.float32(mono[0] / AMAX ** (j + 1))))

r = (C0 + sum(c * a ** (k + 1) for k, c in enumerate(fixed))) / f  # P / f
print(f"/* float coefficients: max weighted relative error of P {np.max(np.abs(r - 1) * w * f):.3g}"
      f", of P^16 {np.max(np.abs(r ** 16 - 1) * w * f):.3g} */")
for k, c in enumerate([C0] + fixed):
    assert np.float32(float(f"{c:.9g}")) == np.float32(c)
    print(f"#define ATTN__GELU_C{k} {c:.9g}f")
