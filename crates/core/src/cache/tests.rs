//! The cache facade, `ResponseCache::get_or_compute`: hit, miss and uncached outcomes,
//! identical concurrent misses computed once, and errors never stored or shared.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use tokio::sync::oneshot;

use super::*;
use crate::error::Error;
use crate::testing;

fn cache(size: usize) -> ResponseCache {
    ResponseCache::new(Arc::new(local::LocalCache::new(size).expect("local cache")))
}

fn key(value: i32) -> CacheKey<'static> {
    let request = testing::request(
        "m",
        "r",
        vec![testing::int32_input("IN", &[1, 1], &[value])],
    );
    CacheKey::of("m", 1, &request).to_stored()
}

fn outputs(value: i32) -> CachedOutputs {
    Arc::new(vec![OutputTensor {
        name: "OUT".into(),
        datatype: nereid_proto::DataType::Int32,
        shape: vec![1, 1],
        data: testing::int32_bytes(&[value]),
        device: None,
    }])
}

/// Counts the computations it starts; each answers `result`.
#[derive(Default)]
struct Model {
    runs: AtomicUsize,
}

impl Model {
    async fn run(&self, result: Result<CachedOutputs>) -> Result<CachedOutputs> {
        self.runs.fetch_add(1, SeqCst);
        result
    }

    fn runs(&self) -> usize {
        self.runs.load(SeqCst)
    }
}

#[tokio::test]
async fn miss_then_hit_without_running_the_model() {
    let cache = cache(1 << 20);
    let model = Model::default();
    let (got, outcome) = cache
        .get_or_compute(key(1), || model.run(Ok(outputs(1))))
        .await;
    assert_eq!(got.expect("computed"), outputs(1));
    assert!(matches!(outcome, Outcome::Miss { .. }), "{outcome:?}");
    let (got, outcome) = cache
        .get_or_compute(key(1), || model.run(Ok(outputs(9))))
        .await;
    assert_eq!(
        got.expect("cached"),
        outputs(1),
        "the stored answer, not a new one"
    );
    assert!(matches!(outcome, Outcome::Hit { .. }), "{outcome:?}");
    assert_eq!(model.runs(), 1);
    // A different input is a different key.
    let (_, outcome) = cache
        .get_or_compute(key(2), || model.run(Ok(outputs(2))))
        .await;
    assert!(matches!(outcome, Outcome::Miss { .. }), "{outcome:?}");
    let counters = cache.snapshot().expect("a local cache has counters");
    assert_eq!(
        (counters.hits, counters.misses, counters.entries),
        (1, 2, 2)
    );
}

#[tokio::test]
async fn errors_and_oversized_answers_are_not_cached() {
    let cache = cache(1 << 20);
    let model = Model::default();
    let (got, outcome) = cache
        .get_or_compute(key(1), || model.run(Err(Error::internal("boom"))))
        .await;
    assert_eq!(got.expect_err("the error is returned").message(), "boom");
    assert_eq!(outcome, Outcome::Uncached);
    let (got, outcome) = cache
        .get_or_compute(key(1), || model.run(Ok(outputs(1))))
        .await;
    assert_eq!(got.expect("computed again"), outputs(1));
    assert!(matches!(outcome, Outcome::Miss { .. }), "{outcome:?}");
    assert_eq!(model.runs(), 2);

    // An answer larger than the whole cache is returned but not stored; Triton counts a
    // refused insertion as a miss all the same.
    let small = self::cache(1024);
    let big: CachedOutputs = Arc::new(vec![OutputTensor {
        name: "OUT".into(),
        datatype: nereid_proto::DataType::Uint8,
        shape: vec![4096],
        data: bytes::Bytes::from(vec![1u8; 4096]),
        device: None,
    }]);
    for _ in 0..2 {
        let (got, outcome) = small
            .get_or_compute(key(3), || model.run(Ok(big.clone())))
            .await;
        assert_eq!(got.expect("computed"), big);
        assert!(matches!(outcome, Outcome::Miss { .. }), "{outcome:?}");
    }
    assert_eq!(model.runs(), 4);
}

#[tokio::test]
async fn identical_concurrent_misses_compute_once() {
    let cache = cache(1 << 20);
    let model = Model::default();
    let (release, released) = oneshot::channel::<()>();
    let leader = cache.get_or_compute(key(1), || async {
        released.await.expect("released");
        model.run(Ok(outputs(1))).await
    });
    let follower = cache.get_or_compute(key(1), || model.run(Ok(outputs(9))));
    // Polled in order: the leader starts computing, the follower joins its flight, then
    // the leader is let go.
    let ((led, led_outcome), (followed, followed_outcome), ()) =
        tokio::join!(leader, follower, async {
            release.send(()).expect("leader waits");
        });
    assert_eq!(led.expect("computed"), outputs(1));
    assert!(
        matches!(led_outcome, Outcome::Miss { .. }),
        "{led_outcome:?}"
    );
    assert_eq!(followed.expect("shared"), outputs(1));
    assert!(
        matches!(followed_outcome, Outcome::Hit { .. }),
        "{followed_outcome:?}"
    );
    assert_eq!(model.runs(), 1);
}

#[tokio::test]
async fn a_failed_leader_lets_its_followers_compute_on_their_own() {
    let cache = cache(1 << 20);
    let model = Model::default();
    let (release, released) = oneshot::channel::<()>();
    let leader = cache.get_or_compute(key(1), || async {
        released.await.expect("released");
        model.run(Err(Error::internal("boom"))).await
    });
    let follower = cache.get_or_compute(key(1), || model.run(Ok(outputs(2))));
    let ((led, led_outcome), (followed, followed_outcome), ()) =
        tokio::join!(leader, follower, async {
            release.send(()).expect("leader waits");
        });
    assert_eq!(led.expect_err("failed").message(), "boom");
    assert_eq!(led_outcome, Outcome::Uncached);
    assert_eq!(
        followed.expect("computed itself"),
        outputs(2),
        "no error shared"
    );
    assert!(
        matches!(followed_outcome, Outcome::Miss { .. }),
        "{followed_outcome:?}"
    );
    assert_eq!(model.runs(), 2);
}
