"""The generators f(t) of SPEC section 2, as sympy text in kind order.

Plain data at the bottom of the package: the symbolic layer derives the kernels from it and
the registry (``mdverify.divergences``) serves entries built on it. It imports nothing.
"""

#: name -> (generator f(t) as sympy text, the divergence written out), in kind order.
STANDARD = {
    "tv": ("Abs(t - 1)/2", "1/2 sum |r - p|"),
    "kl": ("t*log(t)", "KL(r || p) = sum r log(r/p)"),
    "reverse_kl": ("-log(t)", "KL(p || r) = sum p log(p/r)"),
    "pearson": ("(t - 1)**2", "sum (r - p)^2 / p"),
    "neyman": ("(t - 1)**2/t", "sum (r - p)^2 / r"),
    "hellinger": ("(sqrt(t) - 1)**2", "sum (sqrt r - sqrt p)^2"),
    "jensen_shannon": ("(t*log(t) - (1 + t)*log((1 + t)/2))/2", "1/2 KL(r || m) + 1/2 KL(p || m), m = (r + p)/2"),
    "triangular": ("(t - 1)**2/(t + 1)", "sum (r - p)^2 / (r + p)"),
    "jeffreys": ("(t - 1)*log(t)", "KL(r || p) + KL(p || r)"),
}
#: The Amari alpha family, its parameter ``a`` left symbolic.
ALPHA = "(t**a - a*t - (1 - a))/(a*(a - 1))"
#: Every kind, in order: the parameter-free generators, then the alpha family.
KINDS = (*STANDARD, "alpha")
