"""TokenSequence: L tokens from a vocabulary of V, reward only at the end, token-level ratios matter.

The policy is autoregressive and tabular in (position, previous token): `logp[r, l, c, v]` is
log π(x_l = v | x_{l-1} = c) for run r, shape (R, L, V, V); position 0 reads context 0 (a fixed start
token), so the response distribution is a position-dependent Markov chain.

The verifiable reward is "a finite automaton accepts x_1..x_L": `sum_mod` accepts Σ x_l ≡ target (mod m),
`pattern` accepts one exact sequence. Exact statistics come from a forward pass over (previous token,
automaton state), i.e. (R, V, Q) numbers per position instead of V^L sequences:
    α_{l+1}(w, δ(q, w)) += Σ_v α_l(v, q) · π_l(w | v),   P(accept) = Σ_{w, q ∈ accept} α_L(w, q)
(one batched matmul and one scatter-add per position).
Entropy and KL use the chain rule over positions with the marginal of the previous token.
"""

from __future__ import annotations

import torch

from divclip.toy_envs.base import ToyEnv, sample_from_cdf
from divclip.toy_envs.validation import check_choice, check_int, check_real


class TokenSequence(ToyEnv):
    """Length-L responses over V tokens; reward 1 iff the automaton of `task` accepts, else 0."""

    name = "sequence"
    num_prompts = 1

    def __init__(
        self,
        length: int = 8,
        vocab: int = 8,
        task: str = "sum_mod",
        modulus: int = 13,
        target: int = 0,
        pattern=None,
        init_logit_std: float = 0.0,
        env_seed: int = 0,
    ):
        self.length = check_int("length", length, minimum=1, maximum=64)
        self.vocab = check_int("vocab", vocab, minimum=2, maximum=64)
        self.task = check_choice("task", task, ("sum_mod", "pattern"))
        self.init_logit_std = check_real("init_logit_std", init_logit_std, minimum=0.0)
        self.env_seed = check_int("env_seed", env_seed, minimum=0)
        self.horizon = self.length
        g = torch.Generator().manual_seed(self.env_seed)
        L, V = self.length, self.vocab
        if self.task == "sum_mod":
            self.modulus = check_int("modulus", modulus, minimum=2)
            self.target = check_int("target", target, minimum=0, maximum=self.modulus - 1)
            self.pattern = None
            q = torch.arange(self.modulus)
            self.delta = (q[:, None] + torch.arange(V)[None, :]) % self.modulus  # (Q, V) next state
            self.accept = q == self.target
        else:
            self.modulus = self.target = None
            if pattern is None:
                pat = torch.randint(0, V, (L,), generator=g)
            else:
                pat = torch.as_tensor(pattern, dtype=torch.int64).flatten()
                if pat.numel() != L or ((pat < 0) | (pat >= V)).any():
                    raise ValueError(f"pattern must be {L} tokens in [0, {V}), got {pattern!r}")
            self.pattern = pat
            # States 0..L count the matched prefix; L + 1 is "failed". At position l the state is l or failed.
            q = torch.arange(L + 2)
            hit = (q[:, None] < L) & (torch.arange(V)[None, :] == pat[q.clamp(max=L - 1)][:, None])
            self.delta = torch.where(hit, q[:, None] + 1, torch.full_like(hit, L + 1, dtype=torch.int64))
            self.accept = q == L
        self.num_states = self.delta.shape[0]
        self._delta_wq = self.delta.t().contiguous()  # (V, Q): δ(q, w) indexed [w, q], for scatter_add
        self._init_logits = self.init_logit_std * torch.randn(L, V, V, generator=g, dtype=torch.float64)

    def init_logits(self) -> torch.Tensor:
        return self._init_logits.clone()

    # -- rollouts ----------------------------------------------------------------------------------
    def sample(self, logp, prompts, u):
        R, N = prompts.shape
        V = self.vocab
        cdf = logp.exp().cumsum_(-1)  # (R, L, V, V), every row's CDF at once
        ctx = torch.zeros(R, N, dtype=torch.int64)
        u_by_position = u.permute(2, 0, 1).contiguous()  # (L, R, N)
        out = []
        for l in range(self.length):
            rows = cdf[:, l].gather(1, ctx.unsqueeze(-1).expand(R, N, V))  # (R, N, V): CDF of π_l(· | ctx)
            ctx = sample_from_cdf(rows, u_by_position[l])
            out.append(ctx)
        return torch.stack(out, -1)  # (R, N, L)

    def _contexts(self, tokens):
        return torch.cat([torch.zeros_like(tokens[..., :1]), tokens[..., :-1]], -1)  # (R, N, L)

    def token_index(self, prompts, tokens):
        V = self.vocab
        pos = torch.arange(self.length) * (V * V)  # (L,)
        return (pos + self._contexts(tokens) * V + tokens).flatten(1)  # (R, N·L) into the (L·V·V) table

    def rewards(self, prompts, tokens, u):
        state = torch.zeros(tokens.shape[:2], dtype=torch.int64)
        for l in range(self.length):
            state = self.delta[state, tokens[..., l]]
        return self.accept[state].to(torch.float64)

    def is_correct(self, prompts, tokens):
        return self.rewards(prompts, tokens, None) > 0

    # -- exact statistics --------------------------------------------------------------------------
    def _forward(self, probs):
        """α_l(v, q) = P(x_{l-1} = v, automaton state q) for l = 0..L, (R, V, Q) each (context 0 at l = 0).

        Returns (P(accept) (R, 1), previous-token marginals m[r, l, c] = Σ_q α_l(c, q) for l < L, (R, L, V))."""
        R, V = probs.shape[0], self.vocab
        alpha = torch.zeros(R, V, self.num_states, dtype=probs.dtype)
        alpha[:, 0, 0] = 1.0  # start: context token 0, automaton state 0
        target = self._delta_wq.expand(R, V, self.num_states)  # (R, V, Q): state after token w from q
        alphas = []
        for l in range(self.length):
            alphas.append(alpha)
            gamma = torch.bmm(probs[:, l].transpose(1, 2), alpha)  # (R, W, Q): Σ_v π(w|v) α(v, q)
            alpha = torch.zeros_like(gamma).scatter_add_(2, target, gamma)  # move mass q -> δ(q, w)
        accept = alpha[..., self.accept].sum((-1, -2)).unsqueeze(-1)  # (R, 1)
        return accept, torch.stack(alphas, 1).sum(-1)

    def correct_prob(self, logp):
        return self._forward(logp.exp())[0]

    def expected_reward(self, logp):
        return self.correct_prob(logp)[:, 0]

    def _context_marginals(self, probs):
        """m[r, l, c] = P(x_{l-1} = c) under the policy (context 0 at position 0). (R, L, V)"""
        return self._forward(probs)[1]

    def entropy(self, logp):
        probs = logp.exp()
        h = -(probs * logp).sum(-1)  # (R, L, V): H(π_l(· | c))
        return (self._context_marginals(probs) * h).sum((-1, -2)) / self.length

    def kl(self, logp_old, logp_new):
        probs = logp_old.exp()
        kl_rows = (probs * (logp_old - logp_new)).sum(-1)  # (R, L, V)
        return (self._context_marginals(probs) * kl_rows).sum((-1, -2))

    def exact_stats(self, logp_old, logp_new):
        probs = logp_old.exp()
        q, marg = self._forward(probs)  # one pass gives P(accept) and the marginals for entropy and KL
        rows = (probs.unsqueeze(1) * torch.stack([-logp_old, logp_old - logp_new], 1)).sum(-1)  # (R, 2, L, V)
        ent, kl = (marg.unsqueeze(1) * rows).sum((-1, -2)).unbind(1)
        return {"correct_prob": q, "expected_reward": q[:, 0], "entropy": ent / self.length, "kl": kl}

    def config(self) -> dict:
        cfg = {"length": self.length, "vocab": self.vocab, "task": self.task}
        if self.task == "sum_mod":
            cfg |= {"modulus": self.modulus, "target": self.target}
        else:
            cfg["pattern"] = self.pattern.tolist()
        return cfg | {"init_logit_std": self.init_logit_std, "env_seed": self.env_seed}
