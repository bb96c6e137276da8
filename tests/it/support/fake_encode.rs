//! A job body that skips FFmpeg but stores its outputs as the pipeline does.

use std::path::PathBuf;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use vidq::adapters::ffmpeg::encode::{EncodedFiles, Rendition};
use vidq::adapters::storage::Storage;
use vidq::db::DbPool;
use vidq::domain::media::MediaError;
use vidq::pipeline::{AttemptOutput, AttemptPlan};
use vidq::queue::JobBody;

use crate::support::scripted::output;

/// A job body that does what the pipeline does after FFmpeg: small files in the shape of an
/// encode (plus an MP4 of `mp4_bytes`), uploaded by the pipeline's own upload step through
/// the worker's pool.
pub struct FakeEncode {
    pub storage: Storage,
    pub pool: DbPool,
    pub root: PathBuf,
    pub mp4_bytes: usize,
}

impl FakeEncode {
    async fn files(&self, plan: &AttemptPlan) -> EncodedFiles {
        let dir = self.root.join(format!("{}-a{}", plan.video, plan.attempt));
        let hls = dir.join("hls");
        tokio::fs::create_dir_all(&hls).await.unwrap();
        let write = |path: PathBuf, bytes: Vec<u8>| async move {
            tokio::fs::write(&path, bytes).await.unwrap();
            path
        };
        let mut segments = Vec::new();
        for n in 0..3 {
            segments.push(write(hls.join(format!("seg_{n:05}.m4s")), vec![n; 1000]).await);
        }
        let playlist = write(hls.join("index.m3u8"), b"#EXTM3U\n".to_vec()).await;
        EncodedFiles {
            renditions: vec![Rendition {
                prefix: String::new(),
                width: 320,
                height: 240,
                init: write(hls.join("init.mp4"), vec![1; 100]).await,
                segments,
                playlist: playlist.clone(),
            }],
            playlist,
            mp4: write(dir.join("video.mp4"), vec![7; self.mp4_bytes]).await,
            thumbnail: write(dir.join("thumb.jpg"), vec![9; 100]).await,
            dir,
        }
    }
}

impl JobBody for FakeEncode {
    fn run<'a>(
        &'a self,
        plan: &'a AttemptPlan,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<vidq::pipeline::Attempted, MediaError>> {
        Box::pin(async move {
            let files = self.files(plan).await;
            let keys = vidq::pipeline::outputs::upload(
                &self.storage,
                &self.pool,
                plan,
                &files,
                None,
                std::time::Duration::from_secs(120),
                cancel,
            )
            .await?;
            Ok(AttemptOutput {
                keys,
                ..output(plan)
            }
            .into())
        })
    }
}
