"""The parameter-free divergences of SPEC section 2, in a fixed order (their kinds)."""

from mdverify.divergences.registry import register

tv = register("tv", "Abs(t - 1)/2", "1/2 sum |r - p|")
kl = register("kl", "t*log(t)", "KL(r || p) = sum r log(r/p)")
reverse_kl = register("reverse_kl", "-log(t)", "KL(p || r) = sum p log(p/r)")
pearson = register("pearson", "(t - 1)**2", "sum (r - p)^2 / p")
neyman = register("neyman", "(t - 1)**2/t", "sum (r - p)^2 / r")
hellinger = register("hellinger", "(sqrt(t) - 1)**2", "sum (sqrt r - sqrt p)^2")
jensen_shannon = register(
    "jensen_shannon",
    "(t*log(t) - (1 + t)*log((1 + t)/2))/2",
    "1/2 KL(r || m) + 1/2 KL(p || m), m = (r + p)/2",
)
triangular = register("triangular", "(t - 1)**2/(t + 1)", "sum (r - p)^2 / (r + p)")
jeffreys = register("jeffreys", "(t - 1)*log(t)", "KL(r || p) + KL(p || r)")
