//! A request's [`Sampling`] as a llama.cpp sampler chain, in the order llama.cpp's own
//! server applies them: penalties, top-k, top-p, min-p, temperature, then the draw.

use llama_cpp_2::sampling::LlamaSampler;

use crate::sampling::Sampling;

/// llama.cpp's seed value that asks for a random seed.
const RANDOM_SEED: u32 = u32::MAX;

/// The sampler chain of one sequence over a vocabulary of `n_vocab` tokens;
/// `engine_seed` is used when the request has none. Penalties count every token this
/// sequence generates (up to `context_length`); vLLM's repetition penalty also counts
/// the prompt's.
pub fn chain(
    sampling: &Sampling,
    engine_seed: Option<u32>,
    n_vocab: i32,
    context_length: u32,
) -> LlamaSampler {
    let mut samplers = Vec::new();
    let penalised = sampling.repetition_penalty != 1.0
        || sampling.presence_penalty != 0.0
        || sampling.frequency_penalty != 0.0;
    if penalised {
        samplers.push(LlamaSampler::penalties(
            n_vocab,
            i32::try_from(context_length).unwrap_or(i32::MAX),
            sampling.repetition_penalty,
            sampling.frequency_penalty,
            sampling.presence_penalty,
        ));
    }
    if sampling.temperature <= 0.0 {
        samplers.push(LlamaSampler::greedy());
        return LlamaSampler::chain_simple(samplers);
    }
    if let Some(k) = sampling.top_k {
        samplers.push(LlamaSampler::top_k(i32::try_from(k).unwrap_or(i32::MAX)));
    }
    if sampling.top_p < 1.0 {
        samplers.push(LlamaSampler::top_p(sampling.top_p, 1));
    }
    if sampling.min_p > 0.0 {
        samplers.push(LlamaSampler::min_p(sampling.min_p, 1));
    }
    samplers.push(LlamaSampler::temp(sampling.temperature));
    let seed = sampling.seed.or(engine_seed).unwrap_or(RANDOM_SEED);
    samplers.push(LlamaSampler::dist(seed));
    LlamaSampler::chain_simple(samplers)
}
