import path from 'node:path';
import react from '@vitejs/plugin-react';
import { defineConfig } from 'vite';

const API = process.env.ADMIN_API_URL ?? `http://127.0.0.1:${process.env.PORT ?? '3000'}`;

/** The admin console: built into admin/dist (served by the service at /admin), or served by Vite in dev. */
export default defineConfig(({ command }) => {
  // The built console is always React's production build, whatever NODE_ENV the caller runs with (tests: `test`).
  if (command === 'build') process.env.NODE_ENV = 'production';
  return {
    root: import.meta.dirname,
    base: '/admin/',
    plugins: [react()],
    css: { postcss: path.join(import.meta.dirname, 'postcss.config.mjs') },
    build: {
      outDir: path.join(import.meta.dirname, 'dist'),
      emptyOutDir: true,
      chunkSizeWarningLimit: 2000,
      reportCompressedSize: false,
      rollupOptions: {
        output: {
          // Libraries change less often than the console: separate files keep them cached across releases.
          manualChunks: {
            react: ['react', 'react-dom', '@tanstack/react-query'],
            mantine: ['@mantine/core', '@mantine/hooks', '@mantine/notifications'],
            charts: ['@mantine/charts', 'recharts'],
            markdown: ['react-markdown'],
          },
        },
      },
    },
    server: {
      port: Number(process.env.ADMIN_DEV_PORT ?? 5173),
      strictPort: false,
      proxy: {
        '/api': { target: API, changeOrigin: false },
        '/uploads': { target: API, changeOrigin: false },
        '/openapi.json': { target: API, changeOrigin: false },
      },
    },
  };
});
