//! Triton's test hooks on a `ModelInfer` call's answer, in milliseconds, read from the
//! environment as its unary inference handler reads them (`infer_handler.h`):
//! `TRITONSERVER_DELAY_RESPONSE_COMPLETE_EXEC` holds the model's answer before the
//! handler takes it, `TRITONSERVER_DELAY_RESPONSE_COMPLETION` before it is sent. Triton's
//! QA (L0_request_cancellation) cancels calls while their answers wait; here a call whose
//! client cancels meanwhile ends at once, its answer dropped. The handler's other hooks
//! (`TRITONSERVER_DELAY_GRPC_PROCESS`, `..._NOTIFICATION`, `..._ENQUEUE` ...) time steps of
//! Triton's completion-queue state machine, which this handler does not have.

use std::time::Duration;

/// Holds the model's answer before the handler takes it.
pub const COMPLETE_EXEC_VAR: &str = "TRITONSERVER_DELAY_RESPONSE_COMPLETE_EXEC";
/// Holds the answer before it is sent.
pub const COMPLETION_VAR: &str = "TRITONSERVER_DELAY_RESPONSE_COMPLETION";

/// The two waits; both none unless the variables name them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InferDelays {
    complete_exec: Option<Duration>,
    completion: Option<Duration>,
}

impl InferDelays {
    /// The waits the environment names.
    pub fn from_env() -> Self {
        let read = |var: &str| delay_ms(var, std::env::var(var).ok().as_deref());
        Self {
            complete_exec: read(COMPLETE_EXEC_VAR),
            completion: read(COMPLETION_VAR),
        }
    }

    /// Holds the model's answer (an error too) for both waits: before the handler takes
    /// it, then before it is sent (encoding it between takes no time worth a step).
    pub async fn hold(&self) {
        if let Some(wait) = self.complete_exec {
            tracing::info!(
                "Delaying InferResponseComplete execution by {} ms...",
                wait.as_millis()
            );
            tokio::time::sleep(wait).await;
        }
        if let Some(wait) = self.completion {
            tracing::info!(
                "Delaying InferResponseComplete by {} ms...",
                wait.as_millis()
            );
            tokio::time::sleep(wait).await;
        }
    }
}

/// The wait `value` of variable `var` names, read as Triton reads it (`std::stoi`:
/// leading blanks, a sign, digits; a value without digits is logged and means none, as
/// does 0 or less).
fn delay_ms(var: &str, value: Option<&str>) -> Option<Duration> {
    let text = value?.trim_start();
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let Ok(ms) = digits.parse::<u64>() else {
        tracing::error!("Unable to parse the debug variable {var}, using 0 ms");
        return None;
    };
    (!negative && ms > 0).then(|| Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_as_tritons_stoi_reads_them() {
        let ms = |v| delay_ms("V", Some(v));
        assert_eq!(ms("5000"), Some(Duration::from_millis(5000)));
        assert_eq!(ms(" 250ms"), Some(Duration::from_millis(250)));
        assert_eq!(ms("+7"), Some(Duration::from_millis(7)));
        assert_eq!(ms("0"), None);
        assert_eq!(ms("-5"), None);
        assert_eq!(ms("soon"), None);
        assert_eq!(delay_ms("V", None), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_waits_hold_the_answer_for_their_time() {
        let delays = InferDelays {
            complete_exec: Some(Duration::from_millis(300)),
            completion: Some(Duration::from_millis(200)),
        };
        let start = tokio::time::Instant::now();
        delays.hold().await;
        assert_eq!(start.elapsed(), Duration::from_millis(500));
        let start = tokio::time::Instant::now();
        InferDelays::default().hold().await;
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
